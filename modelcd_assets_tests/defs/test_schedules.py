"""The monitoring schedules: a run request when production has something to judge, a skip with the reason when not."""

from pathlib import Path

import dagster as dg
import pytest

from modelcd_assets.defs.schedules import (
    LIVE_TRAFFIC_JOB,
    PRODUCTION_RECHECK_JOB,
    gate_selftest_weekly,
    live_traffic_hourly,
    production_recheck_nightly,
)
from modelcd_assets.lib.errors import RegistryUnavailable
from modelcd_assets.lib.operations.traffic_log import TrafficLog
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource
from modelcd_assets_tests.conftest import TEST_LOCK


def resources(env) -> dict:
    return {
        "registry": MlflowRegistryResource(
            tracking_uri=env.env["MLFLOW_TRACKING_URI"], artifact_location=env.env["MODELCD_MLFLOW_ARTIFACTS"]
        ),
        "state": LocalStateResource(home=env.env["MODELCD_HOME"], data_dir=env.env["MODELCD_DATA"]),
    }


def tick(schedule: dg.ScheduleDefinition, env) -> dg.RunRequest | dg.SkipReason:
    # No instance: the schedules read only the registry and the state folder. (Passing one from instance_for_test
    # leaves Dagster's current defs-state storage pointing at it after it is closed: every later load of the code
    # location in the session then fails.)
    with dg.build_schedule_context(resources=resources(env)) as context:
        data = schedule.evaluate_tick(context)
    if data.run_requests:
        assert len(data.run_requests) == 1
        return data.run_requests[0]
    return dg.SkipReason(data.skip_message)


@pytest.fixture
def registered(modelcd_env, tiny_base):
    """Two candidate models, neither in production yet."""
    for name in ("intent-a", "intent-b"):
        modelcd_env.registry.register(tiny_base, name)
    return modelcd_env


def test_nothing_in_production_skips_both(registered):
    for schedule in (live_traffic_hourly, production_recheck_nightly):
        got = tick(schedule, registered)
        assert isinstance(got, dg.SkipReason) and "no registered model has a production version" in got.skip_message


def test_production_without_sampled_traffic_is_rechecked_but_not_judged_for_drift(registered):
    reg = registered.registry
    reg.move_production(reg.versions("intent-a")[0], {"test": True}, expected=None, lock=TEST_LOCK)
    hourly = tick(live_traffic_hourly, registered)
    assert isinstance(hourly, dg.SkipReason) and "no sampled traffic for intent-a" in hourly.skip_message
    nightly = tick(production_recheck_nightly, registered)
    assert isinstance(nightly, dg.RunRequest) and nightly.tags["modelcd/models"] == "intent-a"
    # Sampling switched off writes nothing, so it still skips.
    TrafficLog(Path(registered.env["MODELCD_HOME"]), "intent-a", ratio=0.0, max_records=10)
    assert isinstance(tick(live_traffic_hourly, registered), dg.SkipReason)


def test_sampled_traffic_of_a_production_model_asks_for_a_live_drift_run(registered):
    reg = registered.registry
    reg.move_production(reg.versions("intent-a")[0], {"test": True}, expected=None, lock=TEST_LOCK)
    TrafficLog(Path(registered.env["MODELCD_HOME"]), "intent-b", ratio=1.0, max_records=10).append("1", ["not in production: not judged"])
    assert isinstance(tick(live_traffic_hourly, registered), dg.SkipReason)
    TrafficLog(Path(registered.env["MODELCD_HOME"]), "intent-a", ratio=1.0, max_records=10).append("1", ["where is my parcel"])
    got = tick(live_traffic_hourly, registered)
    assert isinstance(got, dg.RunRequest) and got.tags["modelcd/models"] == "intent-a"


def test_each_schedule_runs_its_own_job_and_starts_running():
    assert live_traffic_hourly.job_name == LIVE_TRAFFIC_JOB and live_traffic_hourly.cron_schedule == "0 * * * *"
    assert production_recheck_nightly.job_name == PRODUCTION_RECHECK_JOB and production_recheck_nightly.cron_schedule == "0 2 * * *"
    for schedule in (live_traffic_hourly, production_recheck_nightly, gate_selftest_weekly):
        assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING


def test_a_registry_that_does_not_answer_fails_the_tick_rather_than_skipping(modelcd_env, monkeypatch):
    from mlflow import MlflowClient

    def outage(self, *args, **kwargs):
        raise ConnectionError("connection refused")

    monkeypatch.setattr(MlflowClient, "search_registered_models", outage)
    for schedule in (live_traffic_hourly, production_recheck_nightly):
        with pytest.raises(Exception) as e:
            tick(schedule, modelcd_env)
        cause = e.value.__cause__  # Dagster wraps what the schedule raised in a ScheduleExecutionError
        assert isinstance(cause, RegistryUnavailable) and "could not list the registered models" in str(cause), repr(e.value)
