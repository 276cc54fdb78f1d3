"""The storage every modelcd command sets up follows MODELCD_PG_URL: SQLite without it, Postgres with it, on the same
DAGSTER_HOME. No server is needed here; test_postgres_backend.py loads Postgres instances on a real one."""

from pathlib import Path

import dagster as dg
import pytest
import yaml

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.operations.instance_config import POSTGRES_STORAGE, mlflow_url, normalize_pg_url
from modelcd_assets.lib.operations.settings import TEMPLATE, apply_local_defaults, local_defaults

SECRET = "s3cret-pw"
PG_URL = f"postgresql://modelcd:{SECRET}@127.0.0.1:54321/dagster"
DRIVER_URL = f"postgresql+psycopg2://modelcd:{SECRET}@127.0.0.1:54321/dagster"


def instance_file(env: dict) -> Path:
    return Path(env["DAGSTER_HOME"]) / "dagster.yaml"


def storage_classes(dagster_home: str, monkeypatch) -> set[str]:
    monkeypatch.setenv("DAGSTER_HOME", dagster_home)
    instance = dg.DagsterInstance.get()
    try:
        return {type(s).__name__ for s in (instance.run_storage, instance.event_log_storage, instance.schedule_storage)}
    finally:
        instance.dispose()


def test_sqlite_by_default(tmp_path, monkeypatch):
    env = {"MODELCD_HOME": str(tmp_path / "home")}
    applied = apply_local_defaults(env)
    assert applied["MODELCD_PG_URL"] == ""
    assert applied["MLFLOW_TRACKING_URI"] == f"sqlite:///{tmp_path / 'home' / 'mlflow.db'}"
    assert instance_file(env).read_text() == TEMPLATE.read_text()
    assert storage_classes(env["DAGSTER_HOME"], monkeypatch) == {"SqliteRunStorage", "SqliteEventLogStorage", "SqliteScheduleStorage"}


def test_postgres_when_modelcd_pg_url_is_set(tmp_path):
    env = {"MODELCD_HOME": str(tmp_path / "home"), "MODELCD_PG_URL": PG_URL}
    applied = apply_local_defaults(env)
    text = instance_file(env).read_text()
    assert text.startswith(TEMPLATE.read_text().rstrip("\n"))
    config = yaml.safe_load(text)
    assert config["storage"] == {"postgres": {"postgres_url": {"env": "MODELCD_PG_URL"}}}
    assert config["concurrency"] == yaml.safe_load(TEMPLATE.read_text())["concurrency"]
    assert SECRET not in text
    assert applied["MODELCD_PG_URL"] == env["MODELCD_PG_URL"] == DRIVER_URL
    assert applied["MLFLOW_TRACKING_URI"] == f"postgresql+psycopg2://modelcd:{SECRET}@127.0.0.1:54321/mlflow"


def test_switching_the_environment_rewrites_the_same_instance_file(tmp_path, monkeypatch):
    home = str(tmp_path / "home")
    apply_local_defaults({"MODELCD_HOME": home, "MODELCD_PG_URL": PG_URL})
    assert "postgres" in yaml.safe_load(instance_file(local_defaults(Path(home))).read_text())["storage"]
    env = {"MODELCD_HOME": home}
    apply_local_defaults(env)
    assert instance_file(env).read_text() == TEMPLATE.read_text()
    assert storage_classes(env["DAGSTER_HOME"], monkeypatch) == {"SqliteRunStorage", "SqliteEventLogStorage", "SqliteScheduleStorage"}


def test_an_explicit_mlflow_tracking_uri_wins(tmp_path):
    env = {"MODELCD_HOME": str(tmp_path / "home"), "MODELCD_PG_URL": PG_URL, "MLFLOW_TRACKING_URI": "http://mlflow.internal:5000"}
    assert apply_local_defaults(env)["MLFLOW_TRACKING_URI"] == "http://mlflow.internal:5000"


def test_a_state_folder_from_local_defaults_stays_on_sqlite_under_an_exported_url(tmp_path, monkeypatch):
    """The fault sandbox and the tests build their state from local_defaults; a shell's MODELCD_PG_URL must not reach
    the processes they start, or those would write into the user's Postgres."""
    monkeypatch.setenv("MODELCD_PG_URL", PG_URL)
    env = local_defaults(tmp_path / "home")
    apply_local_defaults(env)
    assert env["MODELCD_PG_URL"] == ""
    assert instance_file(env).read_text() == TEMPLATE.read_text()


def test_an_outdated_instance_file_of_ours_is_rewritten(tmp_path):
    env = {"MODELCD_HOME": str(tmp_path / "home"), "MODELCD_PG_URL": PG_URL}
    apply_local_defaults(dict(env))
    old = TEMPLATE.read_text().splitlines()[0] + "\nconcurrency:\n  pools:\n    default_limit: 4\n"
    instance_file(local_defaults(Path(env["MODELCD_HOME"]))).write_text(old)
    apply_local_defaults(env)
    assert yaml.safe_load(instance_file(env).read_text())["concurrency"]["pools"] == {"default_limit": 1}


MY_POSTGRES_STORAGE = "storage:\n  postgres:\n    postgres_db:\n      username: me\n      hostname: db\n      db_name: d\n"
MY_POSTGRES_PARTS = "".join(
    f"{part}_storage:\n  module: dagster_postgres.{part}_storage\n  class: Postgres{cls}Storage\n  config:\n    postgres_url: {{env:"
    " MY_URL}\n"
    for part, cls in (("run", "Run"), ("event_log", "EventLog"), ("schedule", "Schedule"))
)


@pytest.mark.parametrize("pg_url", ["", PG_URL], ids=["sqlite", "postgres"])
@pytest.mark.parametrize("storage", [MY_POSTGRES_STORAGE, MY_POSTGRES_PARTS], ids=["storage-section", "three-sections"])
def test_a_hand_written_instance_file_with_postgres_storage_is_left_alone(tmp_path, pg_url, storage):
    env = {"MODELCD_HOME": str(tmp_path / "home"), "MODELCD_PG_URL": pg_url}
    dagster_home = Path(local_defaults(Path(env["MODELCD_HOME"]))["DAGSTER_HOME"])
    dagster_home.mkdir(parents=True)
    mine = "# my instance\n" + storage
    (dagster_home / "dagster.yaml").write_text(mine)
    apply_local_defaults(env)
    assert (dagster_home / "dagster.yaml").read_text() == mine


def test_a_hand_written_instance_file_without_postgres_is_an_error_when_postgres_is_asked_for(tmp_path):
    env = {"MODELCD_HOME": str(tmp_path / "home"), "MODELCD_PG_URL": PG_URL}
    dagster_home = Path(local_defaults(Path(env["MODELCD_HOME"]))["DAGSTER_HOME"])
    dagster_home.mkdir(parents=True)
    (dagster_home / "dagster.yaml").write_text("# my instance\ntelemetry:\n  enabled: false\n")
    with pytest.raises(ModelcdError, match="written by hand .* configures no Postgres storage") as raised:
        apply_local_defaults(env)
    assert str(dagster_home / "dagster.yaml") in str(raised.value) and "unset MODELCD_PG_URL" in str(raised.value)
    assert SECRET not in str(raised.value)
    # Nothing was changed: the user's file, their choice to make.
    assert (dagster_home / "dagster.yaml").read_text() == "# my instance\ntelemetry:\n  enabled: false\n"


@pytest.mark.parametrize(
    "url, message",
    [
        (f"postgres://modelcd:{SECRET}@127.0.0.1:5432/dagster", "no longer accepts postgres://"),
        (f"mysql://modelcd:{SECRET}@127.0.0.1:3306/dagster", "is not a Postgres URL"),
        (f"postgresql://modelcd:{SECRET}@127.0.0.1:5432", "names no database"),
        (f"postgresql://modelcd:{SECRET}@127.0.0.1:5432/a/b", "is not a database name"),
        ("postgresql:///dagster", "names no host"),
    ],
    ids=["postgres-scheme", "mysql", "no-database", "nested-path", "no-host"],
)
def test_a_bad_url_is_an_error_that_names_the_variable_and_hides_the_password(tmp_path, url, message):
    with pytest.raises(ModelcdError, match=message) as raised:
        apply_local_defaults({"MODELCD_HOME": str(tmp_path / "home"), "MODELCD_PG_URL": url})
    assert "MODELCD_PG_URL=" in str(raised.value)
    assert SECRET not in str(raised.value)


@pytest.mark.parametrize(
    "url, expected",
    [
        (PG_URL, DRIVER_URL),
        (DRIVER_URL, DRIVER_URL),
        ("postgresql://u@db.example:6432/dagster?sslmode=require", "postgresql+psycopg2://u@db.example:6432/dagster?sslmode=require"),
        ("postgresql://u@/dagster?host=/run/postgresql", "postgresql+psycopg2://u@/dagster?host=/run/postgresql"),
    ],
)
def test_urls_name_the_psycopg2_driver(url, expected):
    assert normalize_pg_url(url) == expected


def test_mlflow_uses_the_mlflow_database_on_the_same_server_with_the_same_options():
    assert (
        mlflow_url("postgresql://u:p@db.example:6432/dagster?sslmode=require")
        == "postgresql+psycopg2://u:p@db.example:6432/mlflow?sslmode=require"
    )


def test_the_storage_section_reads_the_url_from_the_environment():
    assert yaml.safe_load(POSTGRES_STORAGE) == {"storage": {"postgres": {"postgres_url": {"env": "MODELCD_PG_URL"}}}}


def test_registry_messages_never_show_a_database_password():
    from modelcd_assets.lib.release.registry import masked_uri

    assert (
        masked_uri("postgresql+psycopg2://modelcd:s3cret@127.0.0.1:5433/mlflow")
        == "postgresql+psycopg2://modelcd:***@127.0.0.1:5433/mlflow"
    )
    assert masked_uri("sqlite:///x.db") == "sqlite:///x.db"
