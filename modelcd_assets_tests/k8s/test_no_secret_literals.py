"""Nothing under k8s/ holds a password, token or key: Secrets are only referenced."""

import pytest

from modelcd_assets_tests.k8s.files import K8S
from modelcd_assets_tests.k8s.secret_literals import secret_literals

FILES = sorted(p for p in K8S.rglob("*") if p.is_file())


def test_every_file_under_k8s_is_scanned():
    names = {p.relative_to(K8S).as_posix() for p in FILES}
    assert {"values.yaml", "values.schema.json", "dagster-instance.yaml", "Dockerfile", "README.md", "manifests/serve.yaml"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(K8S).as_posix())
def test_file_holds_no_secret_literal(path):
    assert secret_literals(path.read_text(), path.name) == []


@pytest.mark.parametrize(
    "filename, text",
    [
        ("values.yaml", "postgresql:\n  postgresqlPassword: hunter2\n"),
        ("values.yaml", "password: 12345678\n"),
        ("serve.yaml", "env:\n  - name: DAGSTER_PG_PASSWORD\n    value: hunter2\n"),
        ("env.yaml", "kind: ConfigMap\ndata:\n  MODELCD_ADMIN_TOKEN: 3f9a0c\n"),
        ("mlflow.yaml", "env:\n  - name: MLFLOW_BACKEND_STORE_URI\n    value: postgresql://mlflow:hunter2@db:5432/mlflow\n"),
        ("values.schema.json", '{"apiKey": "AKIA0000"}'),
        ("README.md", "kubectl create secret generic modelcd-serve-admin --from-literal=token=3f9a0c\n"),
        ("README.md", "export PGPASSWORD=hunter2\n"),
        ("Dockerfile", "ENV MODELCD_ADMIN_TOKEN=3f9a0c\n"),
        ("README.md", 'printf \'%s\\n\' "[mlflow]" "admin_password = hunter2"\n'),
        ("basic_auth.ini", "[mlflow]\nadmin_password = hunter2\n"),
    ],
    ids=[
        "chart-password",
        "numeric-password",
        "env-value",
        "configmap-token",
        "url-password",
        "json-api-key",
        "from-literal",
        "shell-export",
        "dockerfile-env",
        "ini-line-in-readme",
        "ini-file",
    ],
)
def test_detector_catches_a_planted_literal(filename, text):
    assert secret_literals(text, filename)


@pytest.mark.parametrize(
    "filename, text",
    [
        (
            "serve.yaml",
            "env:\n  - name: MODELCD_ADMIN_TOKEN\n    valueFrom:\n      secretKeyRef: {name: modelcd-serve-admin, key: token}\n",
        ),
        ("values.yaml", "global:\n  postgresqlSecretName: dagster-postgresql-secret\nenvSecrets: []\n"),
        (
            "dagster-instance.yaml",
            "postgres_db:\n  password:\n    env: DAGSTER_PG_PASSWORD\npostgres_password_secret: dagster-postgresql-secret\n",
        ),
        ("values.yaml", "podSpecConfig:\n  automount_service_account_token: false\n"),
        ("README.md", 'kubectl create secret generic x --from-literal=uri="postgresql://mlflow:${MLFLOW_DB_PASSWORD}@db:5432/mlflow"\n'),
        ("README.md", 'kubectl create secret generic x --from-literal=token="$MODELCD_ADMIN_TOKEN"\n'),
        ("README.md", '"database_uri = postgresql+psycopg2://mlflow_auth:${MLFLOW_AUTH_DB_PASSWORD}@db:5432/mlflow_auth"\n'),
        ("mlflow_users.py", 'USERS = (("modelcd-writer", "MODELCD_MLFLOW_WRITER_PASSWORD", "EDIT"),)\n'),
    ],
    ids=[
        "secret-key-ref",
        "secret-name",
        "env-source",
        "boolean",
        "url-from-env",
        "from-env",
        "ini-uri-from-env",
        "password-variable-name",
    ],
)
def test_detector_accepts_references_to_secrets(filename, text):
    assert secret_literals(text, filename) == []
