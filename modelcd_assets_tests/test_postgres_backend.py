"""Postgres as modelcd's backend: the server scripts/postgres.sh runs, Dagster's run, event-log and schedule storage on it,
and MLflow's registry on it.

One server for the session (modelcd_assets_tests/postgres_server.py), started through the script. MODELCD_SKIP_POSTGRES=1 skips these
tests; without it, a
server that does not start is an error, never a skip.
"""

import os
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dagster as dg
import psycopg2
import pytest
import sqlalchemy
from mlflow import MlflowClient

from modelcd_assets.lib.operations.instance_config import MLFLOW_DATABASE
from modelcd_assets.lib.operations.settings import TEMPLATE, apply_local_defaults
from modelcd_assets.lib.release.registry import ROLE, Registry
from modelcd_assets_tests.postgres_server import libpq, query, script


@pytest.fixture
def pg_env(pg_server, tmp_path, monkeypatch) -> dict[str, str]:
    """A state folder whose Dagster and MLflow storage is the session's server, exported as a modelcd command sees it."""
    env = {"MODELCD_HOME": str(tmp_path / "home"), "MODELCD_PG_URL": pg_server.url}
    apply_local_defaults(env)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def storage_classes(instance: dg.DagsterInstance) -> set[str]:
    return {type(s).__name__ for s in (instance.run_storage, instance.event_log_storage, instance.schedule_storage)}


# The script, without a server.


def test_script_without_a_command_prints_its_usage(tmp_path):
    result = script(tmp_path, "restart")
    assert result.returncode == 1 and "usage: scripts/postgres.sh start|stop|status|url" in result.stderr


def test_script_before_the_first_start_says_to_start(tmp_path):
    url = script(tmp_path, "url")
    assert url.returncode == 1 and "run 'scripts/postgres.sh start' first" in url.stderr
    status = script(tmp_path, "status")
    assert status.returncode == 3 and "no server set up" in status.stdout
    stop = script(tmp_path, "stop")
    assert stop.returncode == 0 and "nothing to stop" in stop.stderr


# The server.


@pytest.mark.postgres
def test_start_sets_up_the_databases_on_loopback_with_a_private_password(pg_server):
    folder = pg_server.folder
    assert pg_server.url.startswith(
        f"postgresql+psycopg2://modelcd:{(folder / 'password').read_text()}@127.0.0.1:{(folder / 'port').read_text().strip()}/dagster"
    )
    assert stat.S_IMODE((folder / "password").stat().st_mode) == 0o600
    assert query(pg_server.url, "SHOW listen_addresses") == [("127.0.0.1",)]
    assert (folder / f".s.PGSQL.{(folder / 'port').read_text().strip()}").is_socket()
    databases = {
        name
        for (name,) in query(
            pg_server.url, "SELECT datname FROM pg_database WHERE datdba = (SELECT oid FROM pg_roles WHERE rolname = 'modelcd')"
        )
    }
    assert databases == {"dagster", MLFLOW_DATABASE}
    assert query(pg_server.url, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user") == [(False,)]
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        psycopg2.connect(libpq(pg_server.url).replace(f":{(folder / 'password').read_text()}@", ":wrong@"))


@pytest.mark.postgres
def test_start_again_status_and_url(pg_server):
    began = time.monotonic()
    again = script(pg_server.home, "start")
    assert again.returncode == 0 and again.stdout.strip() == pg_server.url
    assert time.monotonic() - began < 10
    status = script(pg_server.home, "status")
    assert status.returncode == 0 and status.stdout.startswith(f"running on 127.0.0.1:{(pg_server.folder / 'port').read_text().strip()}")
    mlflow = script(pg_server.home, "url", "mlflow")
    assert mlflow.returncode == 0 and mlflow.stdout.strip() == pg_server.url.rsplit("/", 1)[0] + "/mlflow"
    unknown = script(pg_server.home, "url", "runs")
    assert unknown.returncode == 1 and "choose one of: dagster mlflow" in unknown.stderr


@pytest.mark.postgres
def test_stop_then_start_keeps_the_url_and_the_data(pg_server):
    """Users export the URL (MODELCD_PG_URL=$(scripts/postgres.sh url)); a restart must not change it."""
    query(pg_server.url, "CREATE TABLE IF NOT EXISTS restart_probe (n int)")
    query(pg_server.url, "INSERT INTO restart_probe VALUES (7)")
    stopped = script(pg_server.home, "stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stderr
    assert script(pg_server.home, "status").returncode == 3
    url = script(pg_server.home, "url")
    assert url.returncode == 1 and "is not running; run 'scripts/postgres.sh start'" in url.stderr
    again = script(pg_server.home, "start")
    assert again.returncode == 0 and again.stdout.strip() == pg_server.url
    assert (7,) in query(pg_server.url, "SELECT n FROM restart_probe")


# Dagster on it.


@pytest.mark.postgres
def test_switching_the_environment_switches_storage_on_the_same_dagster_home(pg_server, tmp_path, monkeypatch):
    home = str(tmp_path / "home")

    def instance_under(pg_url: str) -> dg.DagsterInstance:
        env = {"MODELCD_HOME": home, "MODELCD_PG_URL": pg_url}
        apply_local_defaults(env)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return dg.DagsterInstance.get()

    @dg.asset(name=f"switch_{uuid.uuid4().hex[:8]}")
    def asset():
        return 1

    with instance_under(pg_server.url) as instance:
        assert storage_classes(instance) == {"PostgresRunStorage", "PostgresEventLogStorage", "PostgresScheduleStorage"}
        run_id = dg.materialize([asset], instance=instance).run_id
    with instance_under("") as instance:
        assert storage_classes(instance) == {"SqliteRunStorage", "SqliteEventLogStorage", "SqliteScheduleStorage"}
        assert (Path(home) / "dagster" / "dagster.yaml").read_text() == TEMPLATE.read_text()
        assert instance.get_run_by_id(run_id) is None  # the run is in Postgres, not in this home's SQLite
    with instance_under(pg_server.url) as instance:
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.SUCCESS


@pytest.mark.postgres
def test_runs_events_and_dynamic_partitions_are_stored_in_postgres(pg_env, pg_server):
    suffix = uuid.uuid4().hex[:8]
    candidates = dg.DynamicPartitionsDefinition(name=f"candidates_{suffix}")

    @dg.asset(name=f"scored_{suffix}", partitions_def=candidates)
    def scored(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={"accuracy": 0.91, "candidate": context.partition_key})

    with dg.DagsterInstance.get() as instance:
        assert storage_classes(instance) == {"PostgresRunStorage", "PostgresEventLogStorage", "PostgresScheduleStorage"}
        instance.add_dynamic_partitions(candidates.name, ["ticket-intent:3", "ticket-intent:4"])
        result = dg.materialize([scored], instance=instance, partition_key="ticket-intent:4")
        assert result.success
        assert instance.get_run_by_id(result.run_id).status == dg.DagsterRunStatus.SUCCESS
        event = instance.get_latest_materialization_event(scored.key)
        assert event.run_id == result.run_id
        materialization = event.asset_materialization
        assert materialization.partition == "ticket-intent:4"
        assert materialization.metadata["accuracy"].value == 0.91
        assert instance.get_dynamic_partitions(candidates.name) == ["ticket-intent:3", "ticket-intent:4"]

    # What the instance read back is in the dagster database itself.
    url = pg_server.url
    assert query(url, "SELECT status FROM runs WHERE run_id = %s", result.run_id) == [("SUCCESS",)]
    assert query(
        url, "SELECT count(*) FROM event_logs WHERE run_id = %s AND dagster_event_type = 'ASSET_MATERIALIZATION'", result.run_id
    ) == [(1,)]
    assert query(url, "SELECT partition FROM dynamic_partitions WHERE partitions_def_name = %s ORDER BY id", candidates.name) == [
        ("ticket-intent:3",),
        ("ticket-intent:4",),
    ]


SENSOR_DEFS = """
import dagster as dg

@dg.asset(name="{asset}")
def watched():
    return 1

@dg.sensor(name="{sensor}", target=[watched], minimum_interval_seconds=30)
def watcher(context):
    return dg.SkipReason("nothing new")

defs = dg.Definitions(assets=[watched], sensors=[watcher])
"""


@pytest.mark.postgres
def test_sensor_state_is_stored_in_postgres(pg_env, pg_server, tmp_path):
    """`dagster sensor start` and `dagster sensor cursor --set`, as a user runs them: the instigator state they write
    (status and cursor) is the schedule storage's, which the daemon's ticks update too."""
    sensor = f"watcher_{uuid.uuid4().hex[:8]}"
    defs = tmp_path / "defs.py"
    defs.write_text(SENSOR_DEFS.format(asset=f"watched_{sensor}", sensor=sensor))
    dagster = str(Path(sys.executable).with_name("dagster"))
    for args in (["start", sensor], ["cursor", sensor, "--set", "registry-page-7"]):
        done = subprocess.run([dagster, "sensor", *args, "-f", str(defs)], env={**os.environ}, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
    with dg.DagsterInstance.get() as instance:
        (state,) = [s for s in instance.all_instigator_state() if s.instigator_name == sensor]
        assert state.status.value == "RUNNING"
        assert state.instigator_data.cursor == "registry-page-7"
    rows = query(pg_server.url, "SELECT status FROM instigators WHERE selector_id = %s", state.selector_id)
    assert rows == [("RUNNING",)]


# MLflow on it.


@pytest.mark.postgres
def test_mlflow_registry_is_stored_in_postgres_through_psycopg2(pg_env, pg_server, tmp_path):
    tracking_uri = pg_env["MLFLOW_TRACKING_URI"]
    assert tracking_uri == pg_server.url.rsplit("/", 1)[0] + f"/{MLFLOW_DATABASE}"
    assert sqlalchemy.make_url(tracking_uri).get_driver_name() == "psycopg2"
    name = f"ticket-intent-{uuid.uuid4().hex[:8]}"
    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    client.create_registered_model(name, tags={ROLE: "candidate"})
    (tmp_path / "model").mkdir()
    version = client.create_model_version(name, source=(tmp_path / "model").as_uri(), tags={"modelcd.semver": "1.0.0"})
    client.set_registered_model_alias(name, "production", version.version)
    assert client.get_model_version_by_alias(name, "production").version == version.version

    # modelcd's own registry client reads it from the same environment.
    registry = Registry.from_env(pg_env)
    assert name in registry.candidate_models()
    assert registry.production(name).version == str(version.version)

    mlflow_db = pg_server.url.rsplit("/", 1)[0] + f"/{MLFLOW_DATABASE}"
    assert query(mlflow_db, "SELECT version FROM registered_model_aliases WHERE name = %s AND alias = 'production'", name) == [
        (int(version.version),)
    ]
    assert query(mlflow_db, "SELECT value FROM model_version_tags WHERE name = %s AND key = 'modelcd.semver'", name) == [("1.0.0",)]
