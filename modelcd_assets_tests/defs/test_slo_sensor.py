"""The slo: section as trigger_sensor judges it, across several models, against a real Prometheus scraping a real exporter on loopback.

Model intent-a answers slowly, intent-b within its SLO, intent-c has no production version: the
first tick counts one failure for a only, the second asks for exactly one rollback, of a, and a
third tick does not ask again.
"""

from __future__ import annotations

import json
import time
from functools import partial

import pytest

from modelcd_assets.defs.sensors.trigger_sensor import trigger_sensor
from modelcd_assets.lib.judging.slo import PASS, evaluate_slo
from modelcd_assets.lib.tasks.names import CLASSIFICATION
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets_tests.conftest import TEST_LOCK
from modelcd_assets_tests.defs.scraped import scraped
from modelcd_assets_tests.defs.scraped import tick as scraped_tick

SLO = "slo:\n  p99_latency_ms: 100\n  window: 10s\n  min_samples: 20\n  consecutive_failures: 2\n"
LATENCY = {"intent-a": 0.4, "intent-b": 0.01}


@pytest.fixture
def exporter(modelcd_env, tiny_base, tmp_path):
    """Production versions for a and b, their request metrics exported and scraped every second."""
    reg = modelcd_env.registry
    for name in ("intent-a", "intent-b", "intent-c"):
        reg.register(tiny_base, name)
        modelcd_env.policy(name, SLO)
    reg.move_production(reg.versions("intent-a")[0], {"test": True}, expected=None, lock=TEST_LOCK)
    reg.move_production(reg.versions("intent-b")[0], {"test": True}, expected=None, lock=TEST_LOCK)

    def feed(metrics, _i: int) -> None:
        for model, seconds in LATENCY.items():
            metrics.requests.labels(model, "1", "none").inc()
            metrics.errors.labels(model, "1", "none")
            metrics.latency.labels(model, "1", "none").observe(seconds)

    with scraped(tmp_path / "prometheus", feed) as url:
        yield modelcd_env, url


tick = partial(scraped_tick, trigger_sensor)


def test_each_model_is_judged_on_its_own_and_rolled_back_once(exporter):
    env, url = exporter
    slo = PolicyResource(policy_dir=env.env["MODELCD_POLICY_DIR"]).for_model("intent-b").slo
    deadline = time.monotonic() + 60
    while evaluate_slo(url, "intent-b", "1", slo, CLASSIFICATION).outcome != PASS:
        assert time.monotonic() < deadline, "Prometheus never had enough samples for intent-b"
        time.sleep(1)

    first = tick(env, url, None)
    assert not first.run_requests
    state = json.loads(first.cursor)
    assert state["intent-a"]["0:slo"]["count"] == 1 and state["intent-b"]["0:slo"]["count"] == 0 and "intent-c" not in state
    message = first.skip_reason.skip_message
    assert "intent-a v1 slo: fail (p99_latency_ms" in message and "1/2 readings in a row" in message
    assert "intent-b v1 slo: pass, 0/2 readings in a row" in message

    second = tick(env, url, first.cursor)
    assert [r.run_key.split(":")[:4] for r in second.run_requests] == [["trigger", "intent-a", "1", "0"]]
    config = second.run_requests[0].run_config["ops"]["production_rollback"]["config"]
    assert config["model"] == "intent-a" and config["from_version"] == "1" and config["trigger"] == "trigger_sensor: slo"
    why = json.loads(config["reason"])
    assert len(why["slo_evaluations"]) == 2 and why["readings_in_a_row"] == 2

    third = tick(env, url, second.cursor)
    assert not third.run_requests
