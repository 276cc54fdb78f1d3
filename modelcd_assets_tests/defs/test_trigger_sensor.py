"""trigger_sensor against a real Prometheus scraping a real exporter on loopback.

intent-a's production answers slowly and its latency trigger fires a rollback once, while its error-ratio trigger holds
but names a job the sensor cannot launch, which is said every tick and never launched; intent-b's candidate, rolling out,
fails 20% of its requests and its abort_rollout trigger (a PromQL of its own, per version) asks for the rollout's abort
over the state it read. Prometheus down is a skip that keeps the cursor.
"""

from __future__ import annotations

import json
import time
from functools import partial

import pytest

from modelcd_assets.defs.sensors.trigger_sensor import trigger_sensor
from modelcd_assets.lib.judging.slo import query
from modelcd_assets.lib.release.rollout_state import RolloutState, sign_state
from modelcd_assets.lib.release.signing import Keys
from modelcd_assets_tests.conftest import TEST_LOCK
from modelcd_assets_tests.defs.scraped import scraped
from modelcd_assets_tests.defs.scraped import tick as scraped_tick
from modelcd_assets_tests.serving.conftest import free_port

A_POLICY = """\
triggers:
  - metric: p99_latency_ms
    above: 100
    window: 10s
    min_samples: 20
    action: rollback
  - metric: error_ratio
    below: 0.5
    window: 10s
    min_samples: 20
    action: run_job
    job: no_such_job
"""
B_POLICY = """\
triggers:
  - promql: 'sum(rate(modelcd_request_errors_total{model="$model",version="$version"}[10s]))
      / sum(rate(modelcd_requests_total{model="$model",version="$version"}[10s]))'
    above: 0.1
    action: abort_rollout
"""


@pytest.fixture
def exporter(modelcd_env, tiny_base, tmp_path):
    reg = modelcd_env.registry
    for name in ("intent-a", "intent-b"):
        reg.register(tiny_base, name)
    reg.register(tiny_base, "intent-b")
    modelcd_env.policy("intent-a", A_POLICY)
    modelcd_env.policy("intent-b", B_POLICY)
    reg.move_production(reg.versions("intent-a")[0], {"test": True}, expected=None, lock=TEST_LOCK)
    reg.move_production(reg.versions("intent-b")[0], {"test": True}, expected=None, lock=TEST_LOCK)
    state = RolloutState("intent-b", "2", "1", 0, 2, "canary", 0.2, "running", time.time(), 7, "x")
    reg.put_rollout_envelope("intent-b", sign_state(state, Keys.from_env(modelcd_env.env).private))

    def feed(metrics, i: int) -> None:
        metrics.requests.labels("intent-a", "1", "none").inc()
        metrics.errors.labels("intent-a", "1", "none")  # a series at 0: intent-a's error ratio holds below 0.5
        metrics.latency.labels("intent-a", "1", "none").observe(0.4)
        for version in ("1", "2"):
            metrics.requests.labels("intent-b", version, "none").inc()
            errors = metrics.errors.labels("intent-b", version, "none")
            if version == "2" and i % 5 == 0:
                errors.inc()

    with scraped(tmp_path / "prometheus", feed) as url:
        yield modelcd_env, url


tick = partial(scraped_tick, trigger_sensor)


def test_triggers_fire_once_each_with_their_values_and_a_job_they_cannot_launch_is_named(exporter):
    env, url = exporter
    deadline = time.monotonic() + 60
    while (query(url, 'sum(increase(modelcd_requests_total{model="intent-a"}[10s]))') or 0) < 20 or query(
        url, 'sum(rate(modelcd_request_errors_total{model="intent-b",version="2"}[10s]))'
    ) in (None, 0.0):
        assert time.monotonic() < deadline, "Prometheus never had enough samples"
        time.sleep(1)

    first = tick(env, url, None)
    by_job = {r.job_name: r for r in first.run_requests}
    assert set(by_job) == {"rollback_production", "advance_rollout"}
    rollback = by_job["rollback_production"].run_config["ops"]["production_rollback"]["config"]
    assert rollback["model"] == "intent-a" and rollback["from_version"] == "1" and rollback["trigger"].startswith("trigger_sensor")
    why = json.loads(rollback["reason"])
    assert why["value"] > 100 and why["threshold"] == 100 and "histogram_quantile" in why["promql"]
    abort = by_job["advance_rollout"]
    assert abort.partition_key == "intent-b:2"
    config = abort.run_config["ops"]["rollout"]["config"]
    assert (
        config["action"] == "abort"
        and config["expected_sequence"] == 7
        and 'version="2"' in json.loads(config["analysis"])["trigger"]["promql"]
    )
    state = json.loads(first.cursor)
    assert state["intent-a"]["1:p99_latency_ms_100_rollback"]["fired"] is True

    second = tick(env, url, first.cursor)
    assert not second.run_requests  # each fired once for its version
    message = second.skip_reason.skip_message
    assert "intent-a error_ratio < 0.5: run_job: holds, but its action cannot run (run_job names 'no_such_job'" in message
    assert state["intent-a"]["2:error_ratio_0.5_run_job"]["fired"] is False
    assert "intent-a v1 p99_latency_ms > 100: rollback" in message


def test_prometheus_down_is_a_skip_that_keeps_the_cursor(modelcd_env, tiny_base):
    modelcd_env.registry.register(tiny_base, "intent-a")
    modelcd_env.policy("intent-a", A_POLICY)
    reg = modelcd_env.registry
    reg.move_production(reg.versions("intent-a")[0], {"test": True}, expected=None, lock=TEST_LOCK)
    result = tick(modelcd_env, f"http://127.0.0.1:{free_port()}", '{"kept": 1}')
    assert not result.run_requests and result.cursor == '{"kept": 1}' and "unreachable" in result.skip_reason.skip_message
