"""A rollout on live traffic, end to end: the real server following the signed rollout state, a real Prometheus scraping it,
rollout_sensor judging each step from Prometheus, and the moves it asks for run as the daemon runs them.

A good candidate goes through its shadow and canary steps to production, sticky per caller, each answer naming the
version that gave it; one whose shadow copies fail is aborted at its first step with production untouched; and a rollout
state the server must not follow (another key's, a stale one, one naming a version without a verdict, one started against
another production) is refused and counted, production alone answering.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import defaultdict

import dagster as dg
import httpx
import pytest

from modelcd_assets.defs.sensors.rollout_sensor import rollout_sensor
from modelcd_assets.launch import ROLLING_OUT, run_gate, write_report
from modelcd_assets.lib.operations.prometheus_server import PrometheusServer
from modelcd_assets.lib.release import attestation
from modelcd_assets.lib.release.rollout import RolloutHistory, read_state
from modelcd_assets.lib.release.rollout_state import ABORTED, PROMOTED, RolloutState, sign_state
from modelcd_assets.lib.release.signing import Keys, init_keys
from modelcd_assets.serving import ARM_HEADER, CALLER_HEADER, VERSION_HEADER
from modelcd_assets_tests.serving.conftest import MODEL, POLICY, ServerProcess, free_port, gated_state, of_name, samples, wait_for

pytestmark = pytest.mark.slow
TEXTS = ["I was charged twice on my invoice", "the app crashes when I log in", "where is my parcel"]
CALLERS = 40
# Shadow copies run after production's answer, beside the next requests, so on a busy test machine their latency is not
# production's; this test is about the steps and the shares, and the latency rule has tests of its own (test_live_analysis).
ROLLOUT = """\
rollout:
  min_samples: 20
  metrics:
    latency_ms: {max_mean_ratio: 5, max_tail_ratio: 10}
  steps:
    - shadow: 0.5
      for: 6s
    - canary: 0.5
      for: 6s
      max_for: 60s
    - promote
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_trained, tiny_adapters):
    mp = pytest.MonkeyPatch()
    yield from gated_state(tmp_path_factory.mktemp("serving-rollout"), mp, tiny_trained, tiny_adapters)
    mp.undo()


class Traffic:
    """Clients that name themselves (X-Modelcd-Caller), and what answered each of them."""

    def __init__(self, url: str):
        self.url, self.stop = url, threading.Event()
        self.answers: list[tuple[float, str, str, str]] = []  # (time, caller, version, arm)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        with httpx.Client(base_url=self.url, timeout=30) as http:
            while not self.stop.is_set():
                caller = f"user-{i % CALLERS}"
                i += 1
                try:
                    r = http.post("/v1/classify", json={"texts": TEXTS}, headers={CALLER_HEADER: caller})
                except httpx.HTTPError:
                    time.sleep(0.1)
                    continue
                self.answers.append((time.monotonic(), caller, r.headers.get(VERSION_HEADER, ""), r.headers.get(ARM_HEADER, "")))
                time.sleep(0.005)


@pytest.fixture(scope="module")
def stack(served, tmp_path_factory):
    logs = tmp_path_factory.mktemp("stack")
    server = ServerProcess(served.env, logs / "server.log", "--chaos")
    prometheus = PrometheusServer(logs / "prometheus", free_port(), [f"127.0.0.1:{server.port}"], scrape_interval="1s")
    traffic = Traffic(server.url)
    try:
        server.wait_ready(served.v2.version)
        prometheus.start()
        traffic.thread.start()
        yield server, prometheus, traffic
    finally:
        traffic.stop.set()
        prometheus.stop()
        server.stop()


def metrics(server) -> dict:
    return samples(httpx.get(f"{server.url}/metrics", timeout=10).text)


def drive(served, url: str, until: tuple[str, ...], timeout: float = 180) -> tuple[list[dict], str]:
    """Tick rollout_sensor and run each move it asks for, as the daemon would, until the state's status is in `until`."""
    from modelcd_assets.definitions import defs

    job = defs().resolve_job_def("advance_rollout")
    moves, cursor = [], None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_state(served.env.registry, MODEL)
        if state.status in until:
            return moves, state.status
        result = rollout_sensor(
            dg.build_sensor_context(cursor=cursor, instance=served.instance, resources=served.env.sensor_resources(url))
        )
        cursor = result.cursor
        for request in result.run_requests:
            run = job.execute_in_process(
                run_config=request.run_config, instance=served.instance, partition_key=request.partition_key, raise_on_error=False
            )
            assert run.success, [e.message for e in run.all_events if e.event_type_value == "STEP_FAILURE"]
            moves.append(
                json.loads(request.run_config["ops"]["rollout"]["config"]["analysis"]) | {"action": request.run_key.rsplit(":", 1)[1]}
            )
        time.sleep(1)
    raise AssertionError(f"the rollout did not end in {until} within {timeout} s: {read_state(served.env.registry, MODEL).describe()}")


def test_a_good_candidate_goes_through_shadow_and_canary_to_production(served, stack, tiny_adapters):
    server, prometheus, traffic = stack
    served.env.policy(MODEL, POLICY + ROLLOUT)
    candidate = served.env.registry.register(tiny_adapters["good"], MODEL)
    run = run_gate(candidate, instance=served.instance)
    assert run.outcome == ROLLING_OUT, (run.outcome, run.error)
    assert served.env.registry.production(MODEL) == served.v2  # nothing promoted at the gates
    # Its first verdict says its offline gates passed and no more: it may take a share, never production's place.
    first = attestation.verify(served.env.registry.attestation(candidate), Keys.from_env(served.env.env).public, candidate.uri)
    assert first.offline_only
    wait_for(lambda: of_name(metrics(server), "modelcd_rollout_share", arm="shadow") == 0.5, "the server following the shadow step")
    wait_for(lambda: of_name(metrics(server), "modelcd_shadow_pairs_total", version=candidate.version) >= 60, "shadowed pairs", 60)
    shadowing = time.monotonic()

    moves, status = drive(served, prometheus.url, (PROMOTED, ABORTED))
    assert status == PROMOTED, moves
    assert [m["action"] for m in moves] == ["advance", "advance"]
    shadow_step, canary_step = moves
    assert shadow_step["outcome"] == "pass" and canary_step["outcome"] == "pass"
    judged = {m["metric"] for m in shadow_step["metrics"]}
    assert {"label_agreement", "confidence_shift", "latency_ms", "error_rate"} <= judged
    assert "label_agreement" not in {m["metric"] for m in canary_step["metrics"]}  # no pairs at a canary step
    # What a request cost is judged where each arm answers requests of its own, read from the server's priced histogram.
    (priced,) = [m for m in canary_step["metrics"] if m["metric"] == "cost_per_request_usd"]
    assert priced["outcome"] == "pass" and "modelcd_request_cost_usd_bucket" in priced["queries"]["candidate"]
    assert "cost_per_request_usd" not in judged
    for m in canary_step["metrics"]:  # each arm read on its own, never mixed in one query
        arms = {k: v for k, v in m["queries"].items() if k.startswith(("candidate", "production"))}
        assert arms and all(
            f'version="{candidate.version if k.startswith("candidate") else served.v2.version}"' in q for k, q in arms.items()
        )

    reg = served.env.registry
    assert reg.production(MODEL) == candidate
    server.wait_ready(candidate.version, timeout=30)
    final = attestation.verify(reg.attestation(candidate), Keys.from_env(served.env.env).public, candidate.uri)
    assert not final.offline_only and [s["kind"] for s in final.extra["rollout"]] == ["shadow", "canary"]
    history = RolloutHistory(served.env.home, MODEL, candidate.version).read()
    assert [h["action"] for h in history] == ["advance", "advance"]
    # The gate report shows each step's live analysis under the offline gates.
    assert write_report(served.instance, candidate, quiet=True) == ""
    page = (
        served.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("gate_report"), asset_partitions=[candidate.key]), limit=1
        )
        .records[0]
        .asset_materialization.metadata["decision"]
        .value
    )
    assert "Rollout on live traffic" in page and "label_agreement" in page and '{__name__=~"modelcd_request_duration_seconds_bucket' in page

    # The canary step answered a sticky half of the callers from the candidate, naming it; the other half from production.
    by_caller = defaultdict(set)
    canaried = [a for a in traffic.answers if a[0] > shadowing and a[3] == "canary"]
    assert canaried and all(version == candidate.version for _, _, version, _ in canaried)
    for _, caller, version, arm in canaried:
        by_caller[caller].add(arm)
    assert 0 < len(by_caller) < CALLERS


def test_a_candidate_whose_copies_fail_is_aborted_at_its_first_step(served, stack, tiny_adapters):
    server, prometheus, _ = stack
    production = served.env.registry.production(MODEL)
    candidate = served.env.registry.register(tiny_adapters["good2"], MODEL)
    assert run_gate(candidate, instance=served.instance).outcome == ROLLING_OUT
    assert server.admin("POST", "/v1/admin/faults", json={"version": candidate.version, "error_ratio": 0.5}).status_code == 200
    moves, status = drive(served, prometheus.url, (PROMOTED, ABORTED))
    assert status == ABORTED and [m["action"] for m in moves] == ["abort"]
    assert any(m["metric"] == "error_rate" and m["outcome"] == "high" and m["critical"] for m in moves[0]["metrics"])
    assert served.env.registry.production(MODEL) == production
    wait_for(lambda: of_name(metrics(server), "modelcd_rollout_share", arm="shadow") == 0, "the server dropping the aborted share")


def test_a_first_version_under_a_rollout_policy_takes_production_when_its_gates_pass(served, tiny_adapters):
    """With no production to be judged against on live traffic it is promoted at once, as Argo Rollouts' first deploy is;
    a rollout started against nothing would wait for data no production can give and never end."""
    from modelcd_assets.launch import PROMOTED

    reg = served.env.registry
    served.env.policy("tiny-first", POLICY + ROLLOUT)
    ref = reg.register(tiny_adapters["good"], "tiny-first")
    run = run_gate(ref, instance=served.instance)
    assert run.outcome == PROMOTED, (run.outcome, run.error)
    assert reg.production("tiny-first") == ref and read_state(reg, "tiny-first") is None
    final = attestation.verify(reg.attestation(ref), Keys.from_env(served.env.env).public, ref.uri)
    assert not final.offline_only


def write(served, state: RolloutState, keys: Keys | None = None) -> None:
    keys = keys or Keys.from_env(served.env.env)
    served.env.registry.put_rollout_envelope(MODEL, sign_state(state, keys.private))


def test_a_state_the_server_must_not_follow_is_refused_and_counted(served, stack, tmp_path):
    server, _, _ = stack
    reg = served.env.registry
    production = reg.production(MODEL)
    current = read_state(reg, MODEL)
    base = dict(
        model=MODEL,
        against=production.version,
        step=0,
        steps=2,
        kind="shadow",
        share=0.5,
        status="running",
        since=time.time(),
        policy_sha256="x",
    )

    def refused(reason: str) -> float:
        return of_name(metrics(server), "modelcd_rollout_refused_total", reason=reason)

    # Older than the state the server last followed: a replay.
    before = refused("stale")
    write(served, RolloutState(version=served.v1.version, sequence=current.sequence - 1, **base))
    wait_for(lambda: refused("stale") > before, "a replayed older state refused")
    # Signed with another key: not modelcd's rollout.
    other = init_keys(Keys(tmp_path / "o.key", tmp_path / "o.pub"))
    before = refused("unverified")
    write(served, RolloutState(version=served.v1.version, sequence=current.sequence + 1, **base), other)
    wait_for(lambda: refused("unverified") > before, "a state signed with another key refused")
    # The ungated version has no verdict: never shadowed, whoever signs the state.
    before = refused("not_servable")
    write(served, RolloutState(version=served.ungated.version, sequence=current.sequence + 2, **base))
    wait_for(lambda: refused("not_servable") > before, "a version without a verdict refused")
    # Started against another production.
    before = refused("production_moved")
    write(served, RolloutState(version=served.v1.version, sequence=current.sequence + 3, **{**base, "against": served.v1.version}))
    wait_for(lambda: refused("production_moved") > before, "a state against another production refused")
    assert of_name(metrics(server), "modelcd_rollout_share", arm="shadow") == 0
    # A tampered payload does not verify either.
    envelope = sign_state(
        RolloutState(version=served.v1.version, sequence=current.sequence + 4, **base), Keys.from_env(served.env.env).private
    )
    payload = json.loads(base64.b64decode(envelope["payload"]))
    payload["version"] = served.ungated.version
    before = refused("unverified")
    reg.put_rollout_envelope(MODEL, {**envelope, "payload": base64.b64encode(json.dumps(payload).encode()).decode()})
    wait_for(lambda: refused("unverified") > before, "a tampered state refused")
    assert of_name(metrics(server), "modelcd_rollout_share", arm="shadow") == 0
