"""Create the two MLflow users modelcd's pods log in as, and grant them what they need; run it as MLflow's admin.

    kubectl -n modelcd port-forward svc/modelcd-mlflow 5000:5000 &
    MLFLOW_TRACKING_USERNAME=admin MLFLOW_TRACKING_PASSWORD="$MLFLOW_ADMIN_PASSWORD" \\
      MODELCD_MLFLOW_WRITER_PASSWORD="$MODELCD_MLFLOW_WRITER_PASSWORD" \\
      MODELCD_MLFLOW_READER_PASSWORD="$MODELCD_MLFLOW_READER_PASSWORD" \\
      .venv/bin/python k8s/mlflow_users.py http://localhost:5000

- modelcd-writer: EDIT on every experiment and every registered model. The run pods log in as it: registering,
  gating, promoting and rolling back create runs and upload artifacts, create versions, set tags and move the
  production alias.
- modelcd-reader: READ on every experiment and every registered model. The serve pods and the code server's sensors
  log in as it: they list and read models, versions, aliases and tags, and download artifacts (signatures,
  attestations), and can change none of it.

Neither is an admin, so neither can create users or change grants. The server's default_permission is
NO_PERMISSIONS, so a user this script did not grant anything can do nothing. Idempotent: a user that exists gets the
password from the environment, a grant that exists is replaced by the one here. Passwords are read from the
environment, never from the command line.
"""

from __future__ import annotations

import os
import sys

# (user, environment variable with its password, permission on every experiment and registered model)
USERS = (
    ("modelcd-writer", "MODELCD_MLFLOW_WRITER_PASSWORD", "EDIT"),
    ("modelcd-reader", "MODELCD_MLFLOW_READER_PASSWORD", "READ"),
)
RESOURCE_TYPES = ("experiment", "registered_model")
EVERY = "*"


def _code(e: Exception) -> str:
    return getattr(e, "error_code", "")


def ensure_users(tracking_uri: str, environ: dict[str, str] | None = None) -> None:
    """Create or update USERS on the server at tracking_uri, as the admin named by MLFLOW_TRACKING_USERNAME/PASSWORD."""
    from mlflow.exceptions import MlflowException
    from mlflow.server import get_app_client

    env = os.environ if environ is None else environ
    missing = [var for _, var, _ in USERS if not env.get(var)] + [
        var for var in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD") if not os.environ.get(var)
    ]
    if missing:
        raise SystemExit(f"set {', '.join(missing)} (the admin's credentials, and a password for each user)")
    client = get_app_client("basic-auth", tracking_uri=tracking_uri)
    for user, var, permission in USERS:
        try:
            client.get_user(user)
        except MlflowException as e:
            if _code(e) != "RESOURCE_DOES_NOT_EXIST":
                raise
            client.create_user(user, env[var])
            print(f"created user {user}")
        else:
            client.update_user_password(user, env[var])
            print(f"user {user} exists; password set")
        for resource_type in RESOURCE_TYPES:
            try:
                client.grant_user_permission(user, resource_type, EVERY, permission)
            except MlflowException as e:
                if _code(e) != "RESOURCE_ALREADY_EXISTS":
                    raise
                client.revoke_user_permission(user, resource_type, EVERY)
                client.grant_user_permission(user, resource_type, EVERY, permission)
            print(f"  {permission} on every {resource_type}")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    ensure_users(argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
