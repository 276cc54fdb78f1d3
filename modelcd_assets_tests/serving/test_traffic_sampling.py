"""The server samples what it served into the traffic log, and exports the live drift verdict judged on it."""

import logging
import shutil
import threading
import time
from pathlib import Path

import dagster as dg
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from modelcd_assets.launch import PROMOTED, run_gate
from modelcd_assets.lib import layout
from modelcd_assets.lib.operations import traffic_log
from modelcd_assets.lib.operations.traffic_log import LiveDrift
from modelcd_assets.serving.server import app_from_env
from modelcd_assets_tests.conftest import make_env
from modelcd_assets_tests.serving.conftest import ADMIN_TOKEN, MODEL, POLICY

pytestmark = pytest.mark.slow
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
# A small log, so a few requests rotate it; the live drift minimum fits in what it keeps.
SAMPLED = POLICY.replace("serving:\n", "serving:\n  sample_ratio: 1.0\n  sample_max: 100\n") + "drift:\n  live_min_records: 50\n"


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_trained, tiny_adapters):
    mp = pytest.MonkeyPatch()
    e = make_env(tmp_path_factory.mktemp("sampling") / "home", mp)
    e.policy(MODEL, SAMPLED)
    with dg.instance_for_test(temp_dir=e.env["DAGSTER_HOME"]) as instance:
        e.registry.register(tiny_trained, "tiny-base", role="base")
        run = run_gate(e.registry.register(tiny_adapters["good"], MODEL), instance=instance)
        assert run.outcome == PROMOTED, run.error
    yield e
    mp.undo()


def root(env) -> Path:
    return Path(env.env["MODELCD_HOME"])


def start(env) -> TestClient:
    return TestClient(app_from_env(MODEL, environ={**env.env, "MODELCD_ADMIN_TOKEN": ADMIN_TOKEN}, chaos=True))


def admin(client: TestClient) -> TestClient:
    return TestClient(client.app.state.admin_app)


def ready(client: TestClient, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = client.get("/readyz")
        if r.status_code == 200:
            return r.json()["version"]
        time.sleep(0.1)
    raise AssertionError(f"not ready after {timeout} s: {client.get('/readyz').json()}")


@pytest.fixture(scope="module")
def client(env):
    with start(env) as c:
        ready(c)
        yield c


def sampled_texts(env) -> list[str]:
    return [r.text for r in traffic_log.window(root(env), MODEL, 10_000)]


def wait_sampled(env, text: str, timeout: float = 10) -> list[str]:
    """The log once text is in it: samples are written off the request path, in the order they were taken."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in (got := sampled_texts(env)):
            return got
        time.sleep(0.05)
    raise AssertionError(f"{text!r} was not sampled within {timeout} s; the log holds {sampled_texts(env)[-5:]}")


def live_gauges(client: TestClient) -> dict[str, float]:
    r = client.get("/metrics")
    assert r.status_code == 200
    return {
        f"{s.name}{{{s.labels['model']}}}": s.value
        for fam in text_string_to_metric_families(r.text)
        for s in fam.samples
        if s.name.startswith("modelcd_live_")
    }


def test_a_served_request_lands_in_the_traffic_log_and_a_failed_one_does_not(env, client):
    version = client.get("/readyz").json()["version"]
    r = client.post("/v1/classify", json={"texts": ["where is my parcel 1", "I was charged twice 1"]})
    assert r.status_code == 200
    got = wait_sampled(env, "I was charged twice 1")
    assert got[-2:] == ["where is my parcel 1", "I was charged twice 1"]
    assert {rec.version for rec in traffic_log.window(root(env), MODEL, 2)} == {version}
    # Both ways a request fails: an error before the model runs, and NaN outputs after it ran.
    for fault, text in (({"error_ratio": 1.0}, "this request fails"), ({"nan_ratio": 1.0}, "this request gives NaN")):
        assert admin(client).post("/v1/admin/faults", headers=AUTH, json={"version": version, **fault}).status_code == 200
        try:
            assert client.post("/v1/classify", json={"texts": [text]}).status_code == 500
        finally:
            admin(client).post("/v1/admin/faults", headers=AUTH, json={"version": version})
    assert client.post("/v1/classify", json={"texts": ["served after the failure"]}).status_code == 200
    got = wait_sampled(env, "served after the failure")
    assert "this request fails" not in got and "this request gives NaN" not in got


def test_the_log_stays_within_sample_max(env, client):
    for i in range(30):
        assert client.post("/v1/classify", json={"texts": [f"bounded {i}-{k}" for k in range(8)]}).status_code == 200
    got = wait_sampled(env, "bounded 29-7")
    assert 50 <= len(got) <= 100 and got[-1] == "bounded 29-7"


def test_the_log_and_its_folder_are_readable_by_the_server_user_only(env, client):
    """The texts are what clients sent: the log was 0644 in a 0755 folder."""
    assert client.post("/v1/classify", json={"texts": ["private 1"]}).status_code == 200
    wait_sampled(env, "private 1")
    folder = traffic_log.folder(root(env), MODEL)
    assert {p.name: p.stat().st_mode & 0o777 for p in (folder, folder.parent)} == {MODEL: 0o700, layout.TRAFFIC_DIR: 0o700}
    modes = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}
    assert {traffic_log.CURRENT, traffic_log.LOCK} <= set(modes) and set(modes.values()) == {0o600}, modes


def test_samples_beyond_the_writers_queue_are_dropped_and_counted_never_waited_for(env, client):
    """The sampler's queue was unbounded: a slow disk let every sampled body pile up in memory."""
    from modelcd_assets.serving.sampler import SAMPLE_QUEUE

    traffic = client.app.state.traffic
    release = threading.Event()
    append = traffic.append

    def stuck(version, texts, ts=None):
        release.wait(60)  # a disk that does not answer
        return append(version, texts, ts)

    def dropped() -> float:
        return sum(
            s.value
            for fam in text_string_to_metric_families(client.get("/metrics").text)
            for s in fam.samples
            if s.name == "modelcd_traffic_samples_dropped_total" and s.labels == {"model": MODEL}
        )

    before = dropped()
    sent = SAMPLE_QUEUE + 6
    traffic.append = stuck
    try:
        for i in range(sent):
            assert client.post("/v1/classify", json={"texts": [f"queued {i}"]}).status_code == 200
        # One sample is with the stuck writer, SAMPLE_QUEUE wait behind it, the rest were dropped.
        assert sent - SAMPLE_QUEUE - 1 <= dropped() - before <= sent - SAMPLE_QUEUE
    finally:
        release.set()
        del traffic.append
    wait_sampled(env, f"queued {SAMPLE_QUEUE - 1}")


def test_a_sample_that_cannot_be_written_never_fails_the_request(env, client, caplog):
    folder = traffic_log.folder(root(env), MODEL)
    shutil.rmtree(folder, ignore_errors=True)
    folder.write_text("a file where the log's folder should be")  # every append now raises OSError
    try:
        with caplog.at_level(logging.WARNING, logger="modelcd.serve"):
            for i in range(3):
                assert client.post("/v1/classify", json={"texts": [f"unwritable {i}"]}).status_code == 200
            deadline = time.monotonic() + 10
            while not any("sampled traffic cannot be written" in m for m in caplog.messages) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)  # the other two samples fail too, quietly
    finally:
        folder.unlink()
    assert sum("sampled traffic cannot be written" in m for m in caplog.messages) == 1, caplog.messages


def test_metrics_export_the_live_drift_verdict_only_once_judged(env, client):
    path = traffic_log.live_drift_path(root(env), MODEL)
    path.unlink(missing_ok=True)
    assert live_gauges(client) == {}
    verdict = LiveDrift(
        time="2026-01-01T00:00:00+00:00",
        version="1",
        judged=True,
        detected=True,
        input_drifted_share=0.6,
        descriptors=["digit_share", "n_chars", "n_tokens"],
        records=600,
        reason="live traffic has drifted",
    )
    traffic_log.write_live_drift(root(env), MODEL, verdict)
    assert live_gauges(client) == {f"modelcd_live_input_drift_share{{{MODEL}}}": 0.6, f"modelcd_live_drift_detected{{{MODEL}}}": 1.0}
    calm = LiveDrift(**{**verdict.to_dict(), "detected": False, "input_drifted_share": 0.2, "descriptors": ["n_chars"]})
    traffic_log.write_live_drift(root(env), MODEL, calm)
    assert live_gauges(client) == {f"modelcd_live_input_drift_share{{{MODEL}}}": 0.2, f"modelcd_live_drift_detected{{{MODEL}}}": 0.0}
    # Not enough traffic: neither "drift" nor "no drift" is exported.
    traffic_log.write_live_drift(
        root(env), MODEL, LiveDrift(**{**verdict.to_dict(), "judged": False, "detected": False, "input_drifted_share": None})
    )
    assert live_gauges(client) == {}
    path.write_text("{not json")
    assert live_gauges(client) == {}  # and the scrape still answers


def test_sample_ratio_zero_samples_nothing(env, client):
    env.policy(MODEL, SAMPLED.replace("sample_ratio: 1.0", "sample_ratio: 0"))
    try:
        with start(env) as off:
            ready(off)
            assert off.post("/v1/classify", json={"texts": ["not sampled: ratio 0"]}).status_code == 200
            time.sleep(0.5)
    finally:
        env.policy(MODEL, SAMPLED)
    assert client.post("/v1/classify", json={"texts": ["sampled again"]}).status_code == 200
    assert "not sampled: ratio 0" not in wait_sampled(env, "sampled again")
