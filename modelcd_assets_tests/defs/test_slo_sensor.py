"""slo_sensor across several models, against a real Prometheus scraping a real exporter on loopback.

Model intent-a answers slowly, intent-b within its SLO, intent-c has no production version: the
first tick counts one failure for a only, the second asks for exactly one rollback, of a, and a
third tick does not ask again.
"""

from __future__ import annotations

import json
import threading
import time

import dagster as dg
import pytest
from prometheus_client import start_http_server

from modelcd_assets.defs.sensors.slo_sensor import slo_sensor
from modelcd_assets.lib.judging.slo import PASS, evaluate_slo
from modelcd_assets.lib.operations.prometheus_server import PrometheusServer
from modelcd_assets.lib.tasks.names import CLASSIFICATION
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets.serving.metrics import ServerMetrics
from modelcd_assets_tests.conftest import TEST_LOCK
from modelcd_assets_tests.serving.conftest import free_port

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
    metrics = ServerMetrics()
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=metrics.registry)
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            for model, seconds in LATENCY.items():
                metrics.requests.labels(model, "1", "none").inc()
                metrics.errors.labels(model, "1", "none")
                metrics.latency.labels(model, "1", "none").observe(seconds)
            time.sleep(0.01)

    sender = threading.Thread(target=traffic, daemon=True)
    sender.start()
    with PrometheusServer(tmp_path / "prometheus", free_port(), [f"127.0.0.1:{port}"], scrape_interval="1s") as prometheus:
        yield modelcd_env, prometheus.url
    stop.set()
    server.shutdown()


def tick(env, url: str, cursor: str | None):
    with dg.instance_for_test() as instance:
        return slo_sensor(dg.build_sensor_context(cursor=cursor, instance=instance, resources=env.sensor_resources(url)))


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
    assert len(state["intent-a"]["failures"]) == 1 and state["intent-b"]["failures"] == [] and "intent-c" not in state
    message = first.skip_reason.skip_message
    assert "intent-a v1: fail (p99_latency_ms" in message and "intent-b v1: pass" in message

    second = tick(env, url, first.cursor)
    assert [r.run_key for r in second.run_requests] == ["rollback:intent-a:1:1"]
    config = second.run_requests[0].run_config["ops"]["production_rollback"]["config"]
    assert config["model"] == "intent-a" and config["from_version"] == "1" and config["trigger"] == "slo_sensor"
    assert len(json.loads(config["reason"])["slo_evaluations"]) == 2

    third = tick(env, url, second.cursor)
    assert not third.run_requests
