"""Embedded defaults: every piece of local state under one folder, overridable by environment.

Storage follows the environment, on every apply_local_defaults (every modelcd command):

- MODELCD_PG_URL unset or empty: SQLite. Dagster's runs, event log and schedules in $DAGSTER_HOME, MLflow's backend
  store in $MODELCD_HOME/mlflow.db.
- MODELCD_PG_URL=postgresql://USER:PASSWORD@HOST:PORT/DATABASE: Postgres. Dagster's storage in DATABASE (the instance
  file reads the variable when the instance loads), and MLflow's backend store, unless MLFLOW_TRACKING_URI is set, in
  the database `mlflow` on the same server with the same credentials. The URL is rewritten to name the psycopg2
  driver (postgresql+psycopg2://, see lib/operations/instance_config.py). `scripts/postgres.sh start` runs such a server on
  loopback with both databases and prints the URL.

Nothing is copied between the two: switching shows the other store's runs and registry. MLFLOW_TRACKING_URI, when set,
wins for MLflow; model files stay under MODELCD_MLFLOW_ARTIFACTS either way.
"""

from __future__ import annotations

import os
from pathlib import Path

from modelcd_assets.lib.operations.instance_config import PG_URL_VAR, mlflow_url, normalize_pg_url, write_instance_yaml
from modelcd_assets.lib.release.signing import KEYS_DIR, PRIVATE_FILE, PUBLIC_FILE, SIGNING_KEY_ENV, VERIFY_KEY_ENV

TEMPLATE = Path(__file__).resolve().parents[3] / "dagster.yaml"


def local_defaults(home: Path, pg_url: str = "") -> dict[str, str]:
    """Environment for Dagster and MLflow under home: SQLite, or MLflow on the Postgres server pg_url names."""
    home = Path(home).resolve()
    return {
        "MODELCD_HOME": str(home),
        "MODELCD_DATA": str(home / "data"),
        "MODELCD_POLICY_DIR": str(home / "policies"),
        "MODELCD_MLFLOW_ARTIFACTS": str(home / "mlartifacts"),
        "MLFLOW_TRACKING_URI": mlflow_url(pg_url) if pg_url else f"sqlite:///{home / 'mlflow.db'}",
        "DAGSTER_HOME": str(home / "dagster"),
        "MODELCD_PROMETHEUS_URL": "http://127.0.0.1:9090",
        # The signing key pair ('modelcd keys init'): registering and promotion sign, every fetch and load verifies.
        SIGNING_KEY_ENV: str(home / KEYS_DIR / PRIVATE_FILE),
        VERIFY_KEY_ENV: str(home / KEYS_DIR / PUBLIC_FILE),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # MLflow draws a "Downloading artifacts" bar for every fetch (status, audit, each gate step): a terminal's lines are
        # modelcd's own. Set it to true to see them.
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    }


def apply_local_defaults(environ: dict | None = None) -> dict[str, str]:
    """Fill unset variables with the defaults under MODELCD_HOME (default ./.modelcd), prepare the folders, and write
    the Dagster instance file for the storage MODELCD_PG_URL chooses."""
    env = os.environ if environ is None else environ
    pg_url = normalize_pg_url(env[PG_URL_VAR]) if env.get(PG_URL_VAR) else ""
    # Pinned even when empty, so that the processes this environment starts choose the same storage, not one
    # inherited from a shell that exported MODELCD_PG_URL for another state folder.
    env[PG_URL_VAR] = pg_url
    defaults = local_defaults(Path(env.get("MODELCD_HOME", ".modelcd")), pg_url)
    for key, value in defaults.items():
        env.setdefault(key, value)
    for key in ("MODELCD_DATA", "MODELCD_POLICY_DIR", "MODELCD_MLFLOW_ARTIFACTS", "DAGSTER_HOME"):
        # MODELCD_MLFLOW_ARTIFACTS may name the tracking server's store instead (mlflow-artifacts:/, s3://, or empty).
        if env[key] and ":" not in env[key]:
            Path(env[key]).mkdir(parents=True, exist_ok=True)
    # The instance file follows the repository's template (a new pool limit takes effect) and the storage chosen now;
    # one the user wrote themselves (not starting with the template's first line) is left alone.
    write_instance_yaml(Path(env["DAGSTER_HOME"]), TEMPLATE, postgres=bool(pg_url))
    return {k: env[k] for k in (*defaults, PG_URL_VAR)}


def location_defaults(environ: dict | None = None) -> dict[str, str]:
    """The embedded default of every variable the code location's resources read and environ leaves unset, under MODELCD_HOME
    (default ./.modelcd), exactly as apply_local_defaults would fill it: a code location loaded by plain Dagster commands
    (`dagster dev`, `dagster job execute`, `dagster-webserver -w workspace.yaml`) then uses the CLI's state folder, and a variable
    that is set still wins. The folders a default names are made. Unlike apply_local_defaults, environ is not changed and no
    instance file is written: the process that loads a code location does not choose Dagster's instance (DAGSTER_HOME does)."""
    env = os.environ if environ is None else environ
    pg_url = normalize_pg_url(env[PG_URL_VAR]) if env.get(PG_URL_VAR) else ""
    defaults = local_defaults(Path(env.get("MODELCD_HOME", ".modelcd")), pg_url)
    missing = {key: value for key, value in defaults.items() if key not in env and key != "DAGSTER_HOME"}
    for key in ("MODELCD_HOME", "MODELCD_DATA", "MODELCD_POLICY_DIR", "MODELCD_MLFLOW_ARTIFACTS"):
        if key in missing:
            Path(missing[key]).mkdir(parents=True, exist_ok=True)
    return missing
