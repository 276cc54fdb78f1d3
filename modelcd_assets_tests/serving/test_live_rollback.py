"""The real server, a real Prometheus scraping it, and trigger_sensor judging the slo: section from Prometheus: all on loopback.

A healthy window never rolls back; injected latency on production rolls it back to the previous
version that passed its gates, and the server follows; injected errors with no earlier version to
go to leave production where it is; Prometheus down is a skip that keeps the cursor.
"""

from __future__ import annotations

import json
import threading
import time

import dagster as dg
import httpx
import pytest

from modelcd_assets.defs.sensors.trigger_sensor import trigger_sensor
from modelcd_assets.lib.judging.slo import FAIL, evaluate_slo
from modelcd_assets.lib.operations.prometheus_server import PrometheusServer
from modelcd_assets.lib.release.registry import PROMOTION, ROLLED_BACK
from modelcd_assets.lib.tasks.names import CLASSIFICATION
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets_tests.conftest import TEST_LOCK
from modelcd_assets_tests.serving.conftest import MODEL, ServerProcess, free_port, gated_state

pytestmark = pytest.mark.slow
TEXTS = ["I was charged twice on my invoice", "the app crashes when I log in", "where is my parcel"]


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_trained, tiny_adapters):
    mp = pytest.MonkeyPatch()
    yield from gated_state(tmp_path_factory.mktemp("serving-slo"), mp, tiny_trained, tiny_adapters)
    mp.undo()


@pytest.fixture(scope="module")
def stack(served, tmp_path_factory):
    """The server, Prometheus scraping it every second, and a steady trickle of traffic."""
    logs = tmp_path_factory.mktemp("stack")
    server = ServerProcess(served.env, logs / "server.log", "--chaos")
    prometheus = PrometheusServer(logs / "prometheus", free_port(), [f"127.0.0.1:{server.port}"], scrape_interval="1s")
    stop = threading.Event()

    def traffic() -> None:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            while not stop.is_set():
                try:
                    http.post("/v1/classify", json={"texts": TEXTS})
                except httpx.HTTPError:
                    time.sleep(0.1)
                time.sleep(0.02)

    try:
        server.wait_ready(served.v2.version)
        prometheus.start()
        sender = threading.Thread(target=traffic, daemon=True)
        sender.start()
        yield server, prometheus
    finally:
        stop.set()
        prometheus.stop()
        server.stop()


def tick(served, url: str, cursor: str | None):
    return trigger_sensor(dg.build_sensor_context(cursor=cursor, instance=served.instance, resources=served.env.sensor_resources(url)))


def wait_for(outcome: str, served, url: str, version: str, timeout: float = 60):
    slo = PolicyResource(policy_dir=served.env.env["MODELCD_POLICY_DIR"]).for_model(MODEL).slo
    verdict = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        verdict = evaluate_slo(url, MODEL, version, slo, CLASSIFICATION)
        if verdict.outcome == outcome:
            return verdict
        time.sleep(1)
    raise AssertionError(f"Prometheus never judged version {version} {outcome!r} within {timeout} s; last: {verdict}")


def run(served, request: dg.RunRequest):
    from modelcd_assets.definitions import defs

    job = defs().resolve_job_def("rollback_production")
    return job.execute_in_process(run_config=request.run_config, instance=served.instance, tags=request.tags, raise_on_error=False)


def test_a_healthy_window_never_rolls_back(served, stack):
    _, prometheus = stack
    wait_for("pass", served, prometheus.url, served.v2.version)
    cursor = None
    for _ in range(3):
        result = tick(served, prometheus.url, cursor)
        assert not result.run_requests and "pass" in result.skip_reason.skip_message
        cursor = result.cursor
    assert json.loads(cursor)[MODEL]["0:slo"]["count"] == 0
    assert served.env.registry.production(MODEL) == served.v2


def test_injected_latency_rolls_back_and_the_server_follows(served, stack):
    server, prometheus = stack
    assert server.admin("POST", "/v1/admin/faults", json={"version": served.v2.version, "latency_ms": 400}).status_code == 200
    failing = wait_for(FAIL, served, prometheus.url, served.v2.version)
    assert failing.values["p99_latency_ms"] > 150
    first = tick(served, prometheus.url, None)
    assert not first.run_requests and "1/2 readings in a row" in first.skip_reason.skip_message
    second = tick(served, prometheus.url, first.cursor)
    assert len(second.run_requests) == 1
    result = run(served, second.run_requests[0])
    assert result.success
    metadata = result.asset_materializations_for_node("production_rollback")[0].metadata
    assert metadata["to_version"].value == served.v1.version and metadata["trigger"].value == "trigger_sensor: slo"
    why = metadata["why"].value["slo_evaluations"]
    assert len(why) == 2 and all(
        e["values"]["p99_latency_ms"] > 150 and "histogram_quantile" in e["queries"]["p99_latency_ms"] for e in why
    )

    reg = served.env.registry
    assert reg.production(MODEL) == served.v1
    assert "p99_latency_ms" in reg.tags(served.v2)[ROLLED_BACK]
    assert json.loads(reg.tags(served.v1)[PROMOTION])["rollback_from"] == served.v2.version
    server.wait_ready(served.v1.version, timeout=10)  # followed within the 0.5 s poll
    # The same request is not launched twice: the sensor has already asked for this rollback.
    assert not tick(served, prometheus.url, second.cursor).run_requests


def test_injected_errors_with_no_earlier_version_keep_production(served, stack):
    server, prometheus = stack
    assert served.env.registry.production(MODEL) == served.v1
    server.admin("POST", "/v1/admin/faults", json={"version": served.v1.version, "error_ratio": 0.5})
    failing = wait_for(FAIL, served, prometheus.url, served.v1.version)
    assert failing.values["error_ratio"] > 0.05
    cursor = None
    for _ in range(2):
        result = tick(served, prometheus.url, cursor)
        cursor = result.cursor
    assert len(result.run_requests) == 1
    outcome = run(served, result.run_requests[0])
    assert not outcome.success
    message = outcome.get_step_failure_events()[0].event_specific_data.error.cause.message
    assert "no earlier version of tiny-intent passed its gates" in message and "fix forward" in message
    assert served.env.registry.production(MODEL) == served.v1


def test_a_production_version_the_server_refused_is_named_not_judged(served, stack):
    server, prometheus = stack
    server.admin("POST", "/v1/admin/faults", json={"version": served.v1.version})
    reg = served.env.registry
    reg.move_production(
        served.ungated, {"test": "alias moved by hand to a version that was never gated"}, expected=reg.production(MODEL), lock=TEST_LOCK
    )
    try:
        time.sleep(3)  # a few polls: the server refuses the version and keeps serving v1
        assert httpx.get(f"{server.url}/readyz").json()["version"] == served.v1.version
        slo = PolicyResource(policy_dir=served.env.env["MODELCD_POLICY_DIR"]).for_model(MODEL).slo
        verdict = evaluate_slo(prometheus.url, MODEL, served.ungated.version, slo, CLASSIFICATION)
        assert verdict.outcome == "inconclusive"
        assert f"the servers serve version {served.v1.version}, not production {served.ungated.version}" in " ".join(verdict.reasons)
    finally:
        reg.move_production(served.v1, {"test": "alias moved back"}, expected=reg.production(MODEL), lock=TEST_LOCK)


def test_prometheus_down_is_a_skip_that_keeps_the_cursor(served):
    url = f"http://127.0.0.1:{free_port()}"
    result = tick(served, url, '{"kept": 1}')
    assert (
        not result.run_requests
        and "unreachable" in result.skip_reason.skip_message
        and "nothing launched" in result.skip_reason.skip_message
    )
    assert result.cursor == '{"kept": 1}'
