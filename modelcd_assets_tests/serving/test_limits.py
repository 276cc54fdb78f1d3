"""Request limits: a classify request beyond serving.max_body_bytes, max_texts or max_text_chars is refused before it is
parsed or tokenized, named and counted apart, so it can move neither a version's latency nor the SLO that rolls back.

The server used to take 64 texts of 5 MiB each, and a 4 MiB text cost 4 s of tokenization, observed in the very
histogram trigger_sensor reads: oversized garbage could have rolled production back.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from modelcd_assets.lib.judging.policy import ServingPolicy, policy_for
from modelcd_assets.lib.judging.slo import PASS, judge_slo
from modelcd_assets.serving.server import app_from_env
from modelcd_assets_tests.serving.conftest import ADMIN_TOKEN, MODEL, ServerProcess, gated_state, of_name, ready_server, samples

TEXTS = ["I was charged twice on my invoice", "the app crashes when I log in", "where is my parcel"]
LIMITS = ServingPolicy()  # the test policy leaves the limits at their defaults
MIB = 2**20


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_trained, tiny_adapters):
    mp = pytest.MonkeyPatch()
    yield from gated_state(tmp_path_factory.mktemp("serving-limits"), mp, tiny_trained, tiny_adapters)
    mp.undo()


def wait_ready(client: TestClient, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = client.get("/readyz")
        if r.status_code == 200:
            return r.json()["version"]
        time.sleep(0.1)
    raise AssertionError(f"not ready after {timeout} s: {client.get('/readyz').json()}")


@pytest.fixture(scope="module")
def client(served):
    with TestClient(app_from_env(MODEL, environ={**served.env.env, "MODELCD_ADMIN_TOKEN": ADMIN_TOKEN})) as c:
        wait_ready(c)
        yield c


def rejected(metrics: dict, reason: str) -> float:
    return metrics[("modelcd_requests_rejected_total", frozenset({"model": MODEL, "reason": reason}.items()))]


def served_counts(metrics: dict) -> tuple[float, float]:
    """Requests counted for any version, and latencies observed for any version."""
    return of_name(metrics, "modelcd_requests_total", model=MODEL), of_name(metrics, "modelcd_request_duration_seconds_count", model=MODEL)


def p99_ms(metrics: dict, version: str) -> float | None:
    """histogram_quantile(0.99, ...) over the version's buckets, as Prometheus computes it for trigger_sensor."""
    buckets = sorted(
        (float(dict(ls)["le"]), v)
        for (n, ls), v in metrics.items()
        if n == "modelcd_request_duration_seconds_bucket" and dict(ls).get("version") == version
    )
    total = buckets[-1][1] if buckets else 0
    if not total:
        return None
    rank, lower, below = 0.99 * total, 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return 1000 * lower
            return 1000 * (lower + (upper - lower) * (rank - below) / (count - below))
        lower, below = upper, count
    return None


OVER_LIMITS = {
    "a body over max_body_bytes": (
        json.dumps({"texts": ["a" * (LIMITS.max_body_bytes + 10)]}).encode(),
        413,
        "body_too_large",
        "serving.max_body_bytes",
    ),
    "more texts than max_texts": (
        json.dumps({"texts": ["hi"] * (LIMITS.max_texts + 1)}).encode(),
        422,
        "too_many_texts",
        "serving.max_texts",
    ),
    "a text over max_text_chars": (
        json.dumps({"texts": ["hi", "é" * (LIMITS.max_text_chars + 1)]}).encode(),
        422,
        "text_too_long",
        "serving.max_text_chars",
    ),
    "not JSON": (b"\xff{not json", 422, "bad_request", None),
    "deeply nested JSON": (b"[" * 100_000 + b"]" * 100_000, 422, "bad_request", None),
    "an unknown field": (json.dumps({"texts": ["hi"], "priority": 1}).encode(), 422, "bad_request", None),
    "no texts": (json.dumps({"texts": []}).encode(), 422, "bad_request", None),
    "a lone surrogate, which the tokenizer fails on": (b'{"texts": ["a \\ud800 b"]}', 422, "bad_request", None),
}


@pytest.mark.parametrize("case", list(OVER_LIMITS))
def test_a_request_over_a_limit_is_refused_at_once_named_and_counted_apart(client, case):
    body, status, reason, limit = OVER_LIMITS[case]
    before = samples(client.get("/metrics").text)
    r = client.post("/v1/classify", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text[:300]
    assert r.json()["reason"] == reason and len(r.content) < 2000  # the body is never echoed
    if limit is not None:
        value = getattr(LIMITS, limit.split(".")[1])
        assert r.json()["limit"] == limit and r.json()["value"] == value
        assert f"{limit} ({value}" in r.json()["error"]
    after = samples(client.get("/metrics").text)
    assert rejected(after, reason) == rejected(before, reason) + 1
    assert served_counts(after) == served_counts(before)  # no version's requests, errors or latency moved
    assert client.post("/v1/classify", json={"texts": TEXTS}).status_code == 200


def test_limits_allow_a_request_at_each_limit(client):
    at_limits = {"texts": ["w" * LIMITS.max_text_chars] + ["hi"] * (LIMITS.max_texts - 1)}
    r = client.post("/v1/classify", json=at_limits)
    assert r.status_code == 200, r.text[:300]
    assert len(r.json()["predictions"]) == LIMITS.max_texts


def test_a_chunked_body_is_cut_off_at_the_limit_not_read_whole(client):
    """Without Content-Length the body must be counted as it streams; the server stops reading just past the limit."""
    app, chunk, offered = client.app, 64 * 1024, 64 * MIB
    pulled, sent = [0], []

    async def receive():
        pulled[0] += 1
        more = pulled[0] * chunk < offered
        return {"type": "http.request", "body": b"[" + b" " * (chunk - 1) if pulled[0] == 1 else b" " * chunk, "more_body": more}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/classify",
        "raw_path": b"/v1/classify",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "state": {},
    }
    before = rejected(samples(client.get("/metrics").text), "body_too_large")
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 413
    assert pulled[0] * chunk <= LIMITS.max_body_bytes + chunk, f"read {pulled[0] * chunk} bytes of a {LIMITS.max_body_bytes}-byte limit"
    assert "serving.max_body_bytes" in json.loads(b"".join(m.get("body", b"") for m in sent[1:]))["error"]
    assert rejected(samples(client.get("/metrics").text), "body_too_large") == before + 1


# The real server, as `modelcd serve` runs it.


@pytest.fixture(scope="module")
def server(served, tmp_path_factory):
    with ready_server(served.env, tmp_path_factory.mktemp("limits-server") / "server.log", served.v2.version) as proc:
        yield proc


@pytest.mark.slow
def test_a_body_is_refused_on_its_content_length_before_it_is_sent(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(b"POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 104857600\r\n\r\n")
        # The 100 MiB body is never sent: the answer must not wait for it. On a busy machine the head and the body of the
        # answer may arrive in separate reads, so read until the body announced by the answer's own Content-Length is in.
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _content_length(answer):
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"serving.max_body_bytes" in body, answer


def _content_length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


@pytest.mark.slow
def test_oversized_requests_beside_normal_ones_move_neither_the_latency_nor_the_slo(served, server):
    """Bounded streams, on loopback: normal requests from two clients while two others send requests over every limit."""
    slo = policy_for(Path(served.env.env["MODELCD_POLICY_DIR"]), MODEL).slo
    before = samples(httpx.get(f"{server.url}/metrics").text)
    big = b'{"texts": ["' + b"x" * (2 * MIB) + b'"]}'

    def chunked():
        yield b'{"texts": ["'
        for _ in range(32):  # 2 MiB, without Content-Length
            yield b"x" * (64 * 1024)
        yield b'"]}'

    attacks = [
        ("body_too_large", lambda h: h.post("/v1/classify", content=big)),
        ("body_too_large", lambda h: h.post("/v1/classify", content=chunked())),
        ("too_many_texts", lambda h: h.post("/v1/classify", json={"texts": ["x"] * 1000})),
        ("text_too_long", lambda h: h.post("/v1/classify", json={"texts": ["long " * 50_000]})),
        ("bad_request", lambda h: h.post("/v1/classify", content=b"[" * 200_000)),
    ]
    normal_per_client, attacks_per_client = 60, 8
    statuses: dict[str, list[int]] = {"normal": [], "attack": []}
    latencies: list[float] = []
    lock = threading.Lock()

    def normal() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as h:
            for _ in range(normal_per_client):
                start = time.perf_counter()
                r = h.post("/v1/classify", json={"texts": TEXTS})
                with lock:
                    latencies.append(time.perf_counter() - start)
                    statuses["normal"].append(r.status_code)

    def attack(k: int) -> None:
        with httpx.Client(base_url=server.url, timeout=60) as h:
            for i in range(attacks_per_client):
                reason, send = attacks[(i + k) % len(attacks)]
                r = send(h)
                with lock:
                    statuses["attack"].append((reason, r.status_code, r.json().get("reason")))

    threads = [threading.Thread(target=normal) for _ in range(2)] + [threading.Thread(target=attack, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)

    assert statuses["normal"] == [200] * 2 * normal_per_client
    sent = [reason for reason, _, _ in statuses["attack"]]
    assert len(sent) == 2 * attacks_per_client and all(
        reason == got and status in (413, 422) for reason, status, got in statuses["attack"]
    ), statuses["attack"]
    after = samples(httpx.get(f"{server.url}/metrics").text)
    for reason in set(sent):
        assert rejected(after, reason) - rejected(before, reason) == sent.count(reason)
    # Exactly the normal requests reached the model: the histogram and counters trigger_sensor reads saw nothing else.
    version = served.v2.version
    requests = of_name(after, "modelcd_requests_total", version=version) - of_name(before, "modelcd_requests_total", version=version)
    observed = of_name(after, "modelcd_request_duration_seconds_count", version=version) - of_name(
        before, "modelcd_request_duration_seconds_count", version=version
    )
    assert requests == observed == 2 * normal_per_client
    # The SLO judged on this server's series, as trigger_sensor judges Prometheus's: it passes, so nothing here can roll back.
    values = {
        "samples": of_name(after, "modelcd_requests_total", version=version),
        "p99_latency_ms": p99_ms(after, version),
        "error_ratio": (
            of_name(after, "modelcd_request_errors_total", version=version) / of_name(after, "modelcd_requests_total", version=version)
        ),
        "nan_ratio": (
            of_name(after, "modelcd_nan_outputs_total", version=version) / of_name(after, "modelcd_requests_total", version=version)
        ),
    }
    verdict = judge_slo(values, slo)
    assert verdict.outcome == PASS, verdict
    client_p99 = sorted(latencies)[int(0.99 * len(latencies)) - 1] * 1000
    assert client_p99 <= slo.p99_latency_ms, (
        f"normal requests' p99 {client_p99:.0f} ms beside the oversized ones; SLO {slo.p99_latency_ms} ms"
    )


@pytest.mark.slow
def test_the_admin_api_listens_on_its_own_loopback_port_only(served, server):
    assert server.admin("GET", "/v1/admin/adapters").json()["default"] == served.v2.version
    assert httpx.get(f"{server.url}/v1/admin/adapters", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}).status_code == 404
    assert httpx.get(f"{server.admin_url}/v1/classify").status_code in (404, 405)
    listening = Path("/proc/net/tcp")
    if listening.exists():  # Linux: where the admin socket is bound, as the kernel reports it
        bound = [
            line.split()[1]
            for line in listening.read_text().splitlines()[1:]
            if line.split()[3] == "0A" and int(line.split()[1].split(":")[1], 16) == server.admin_port
        ]
        assert bound == [f"0100007F:{server.admin_port:04X}"]


@pytest.mark.slow
def test_an_admin_port_in_use_stops_the_server_with_an_error(served, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = ServerProcess(served.env, tmp_path / "server.log", admin_port=taken.getsockname()[1])
        try:
            assert proc.proc.wait(timeout=180) == 1
        finally:
            proc.stop()
    assert "address already in use" in (tmp_path / "server.log").read_text().lower()
