"""The Dagster instance file modelcd writes into $DAGSTER_HOME: the repository's template plus the storage the environment chooses."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import yaml

from modelcd_assets.lib.errors import ModelcdError

# Every move of a production alias (promotion and rollback) holds a slot of this pool; dagster.yaml limits
# it to 1, so the compare-and-set on the alias is never interleaved with another move, on SQLite or Postgres.
PROMOTION_POOL = "modelcd_promotion"

PG_URL_VAR = "MODELCD_PG_URL"
MLFLOW_DATABASE = "mlflow"
DRIVER_SCHEME = "postgresql+psycopg2"
_SCHEMES = ("postgresql", DRIVER_SCHEME)

# Dagster reads the URL from the environment whenever it loads the instance, so the password is never written here.
POSTGRES_STORAGE = f"""
# Written by modelcd because {PG_URL_VAR} is set (modelcd_assets/lib/operations/settings.py): runs, event log and schedules
# in Postgres. Without {PG_URL_VAR}, modelcd writes this file again without this section, and storage is SQLite.
storage:
  postgres:
    postgres_url:
      env: {PG_URL_VAR}
"""


def normalize_pg_url(url: str) -> str:
    """url as postgresql+psycopg2://..., if it names a database on a Postgres server; else ModelcdError."""
    # SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3, which is not installed; psycopg2 is the driver
    # dagster-postgres is built and tested on, so Dagster and MLflow are both given it by name.
    var = PG_URL_VAR
    parts = urlsplit(url)
    shown = _without_password(url)
    if parts.scheme not in _SCHEMES:
        hint = " (SQLAlchemy 2 no longer accepts postgres://)" if parts.scheme == "postgres" else ""
        raise ModelcdError(
            f"{var}={shown} is not a Postgres URL{hint}; write it as postgresql://USER:PASSWORD@HOST:PORT/DATABASE "
            "('scripts/postgres.sh url' prints one for the local server)"
        )
    if not parts.path.strip("/"):
        raise ModelcdError(f"{var}={shown} names no database; add it after the host: postgresql://USER:PASSWORD@HOST:PORT/dagster")
    if "/" in parts.path.strip("/"):
        raise ModelcdError(f"{var}={shown}: '{parts.path}' is not a database name; the path must be /DATABASE")
    if not parts.hostname and "host=" not in parts.query:
        raise ModelcdError(f"{var}={shown} names no host; write postgresql://USER:PASSWORD@HOST:PORT/DATABASE")
    return urlunsplit(parts._replace(scheme=DRIVER_SCHEME))


def mlflow_url(pg_url: str) -> str:
    """MLflow's backend store: the database `mlflow` on the server pg_url names, with the same credentials and options."""
    return urlunsplit(urlsplit(normalize_pg_url(pg_url))._replace(path=f"/{MLFLOW_DATABASE}"))


def instance_yaml(template_text: str, postgres: bool) -> str:
    """The instance file: the template, and the Postgres storage section when postgres (else Dagster's default, SQLite)."""
    return (template_text.rstrip("\n") + "\n" + POSTGRES_STORAGE) if postgres else template_text


def write_instance_yaml(dagster_home: Path, template: Path, postgres: bool) -> Path:
    """Write $DAGSTER_HOME/dagster.yaml from template for the chosen storage, unless the user wrote that file themselves."""
    # A file is ours when its first line is the template's. One of the user's is left alone; but when Postgres is asked
    # for and that file configures none, the environment's choice would be silently ignored, so that is an error.
    target = Path(dagster_home) / "dagster.yaml"
    if not template.is_file():
        if postgres:
            raise ModelcdError(
                f"{PG_URL_VAR} is set, but the instance template {template} is missing, so modelcd cannot write "
                f"Postgres storage into {target}; install modelcd from its repository ('make install'), or write "
                f"{target} yourself with a 'storage: postgres:' section"
            )
        return target
    wanted = instance_yaml(template.read_text(), postgres)
    if target.exists():
        current = target.read_text()
        if current.splitlines()[:1] != wanted.splitlines()[:1]:
            if postgres and not configures_postgres(current):
                raise ModelcdError(
                    f"{PG_URL_VAR} is set, but {target} was written by hand (it does not start with the first line "
                    f"of {template}) and configures no Postgres storage, so Dagster would not use Postgres; add a "
                    f"'storage: postgres: postgres_url: {{env: {PG_URL_VAR}}}' section to it, delete it to have "
                    f"modelcd write it, or unset {PG_URL_VAR}"
                )
            return target
        if current == wanted:
            return target
    # Atomically: the webserver, the daemon and run workers may be reading it right now.
    with tempfile.NamedTemporaryFile("w", dir=target.parent, prefix=".dagster.yaml.", delete=False) as tmp:
        tmp.write(wanted)
    os.replace(tmp.name, target)
    return target


def configures_postgres(instance_text: str) -> bool:
    """Whether an instance file keeps runs, event log and schedules in Postgres (all at once, or each on its own)."""
    try:
        config = yaml.safe_load(instance_text) or {}
    except yaml.YAMLError:
        return False
    if not isinstance(config, dict):
        return False
    if isinstance(config.get("storage"), dict) and "postgres" in config["storage"]:
        return True
    parts = [config.get(k) for k in ("run_storage", "event_log_storage", "schedule_storage")]
    return all(isinstance(p, dict) and str(p.get("module", "")).startswith("dagster_postgres") for p in parts)


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
