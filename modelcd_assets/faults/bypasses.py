"""Ways around a verdict once the gates have given it: the alias moved by hand, files swapped on the state volume, a model
deleted and re-created, an attestation forged with another key, oversized requests to the server.

Each is a probe: it sets the bypass up in the sandbox, asks what lib/release/servable.check, the server's loader (ClassifierPool)
and the server itself make of it, undoes what it did, and returns the outcome. The server is the app `modelcd serve`
runs (serving.server.app_from_env), driven in process through Starlette's TestClient: the same routes, alias follower,
limits and metrics, without a socket.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg

from modelcd_assets.faults.builders import identical, random_reinit, weights_file
from modelcd_assets.faults.outcomes import ERROR, GOT_THROUGH, NEVER_SERVED, REJECTED, Outcome
from modelcd_assets.faults.sandbox import Sandbox
from modelcd_assets.launch import PROMOTED
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.policy import Policy, policy_for, policy_path
from modelcd_assets.lib.release import attestation, servable
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import PRODUCTION, CandidateRef
from modelcd_assets.lib.release.signing import Keys, init_keys
from modelcd_assets.lib.splits import read_split, split_path
from modelcd_assets.lib.tasks.names import declaration_of

# The server under test follows the alias every half second and samples no traffic into the sandbox's state.
SERVER_POLICY = {"serving": {"poll_seconds": 0.5, "sample_ratio": 0.0}}
READY_TIMEOUT = 120.0


def _policy(sb: Sandbox) -> Policy:
    return policy_for(Path(sb.env["MODELCD_POLICY_DIR"]), sb.name)


def _refusal(sb: Sandbox, ref: CandidateRef) -> str | None:
    """Why servable.check refuses ref; None when it accepts it."""
    try:
        servable.check(sb.registry, sb.home, ref)
    except servable.NotServable as e:
        return str(e)
    return None


def _pool(sb: Sandbox):
    from modelcd_assets.serving.classifier.pool import ClassifierPool

    policy = _policy(sb)
    return ClassifierPool(sb.name, sb.registry, sb.home, policy.serving, policy.safety.limits())


def _load_refusal(pool, version: str) -> str | None:
    """Why the server's loader refuses a version; None when it loads it."""
    try:
        pool.load(version)
    except ModelcdError as e:
        return str(e)
    return None


def _wait(predicate: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise ModelcdError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.1)


@contextlib.contextmanager
def _server(sb: Sandbox) -> Iterator:
    """The server of the sandbox's model, in process, once it serves the sandbox's production (a TestClient); no admin token, so no admin
    API."""
    from fastapi.testclient import TestClient

    from modelcd_assets.serving.server import app_from_env

    with sb.policy(SERVER_POLICY):
        app = app_from_env(sb.name, workers=1, environ=dict(sb.env))
        with TestClient(app) as client:
            _wait(lambda: client.get("/readyz").status_code == 200, f"the server of {sb.name} becoming ready", READY_TIMEOUT)
            serving = client.get("/readyz").json()["version"]
            if serving != sb.production.version:
                raise ModelcdError(
                    f"the server of {sb.name} serves version {serving}, not the sandbox's production {sb.production.version}"
                )
            yield client


def _samples(client) -> dict[tuple[str, frozenset], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(client.get("/metrics").text)
        for s in fam.samples
    }


def _total(samples: dict, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls)


def alias_moved_to_blocked(sb: Sandbox) -> Outcome:
    """The production alias moved by hand (anyone who can write the registry can) to a version its gates blocked."""
    blocked = sb.blocked_version()
    refused = _refusal(sb, blocked)
    if refused is None:
        return Outcome(GOT_THROUGH, detail=f"servable.check accepted {blocked.uri}, which its gates blocked")
    with _server(sb) as client:
        follower = client.app.state.follower
        try:
            sb.registry.client.set_registered_model_alias(sb.name, PRODUCTION, blocked.version)
            _wait(
                lambda: blocked.version in follower.refused or follower.followed == blocked.version,
                "the server seeing the alias move",
                READY_TIMEOUT,
            )
            serving = client.get("/readyz").json().get("version")
            answer = client.post("/v1/classify", json={"texts": ["where is my parcel"]})
            by_number = client.post("/v1/classify", json={"texts": ["where is my parcel"], "adapter": blocked.version}).status_code
            gauge = _total(_samples(client), "modelcd_alias_refused", model=sb.name, version=blocked.version)
        finally:
            sb.restore_production()
    answered_by = answer.json().get("version") if answer.status_code == 200 else None
    if serving != sb.production.version or answered_by != sb.production.version or by_number == 200:
        return Outcome(
            GOT_THROUGH,
            detail=(
                f"the server serves version {serving}, answered from version {answered_by}, and answered "
                f"{blocked.version} by number with {by_number}"
            ),
        )
    counted = "modelcd_alias_refused set" if gauge == 1 else "but modelcd_alias_refused NOT set"
    return Outcome(
        NEVER_SERVED,
        detail=(
            f"{refused}; the server kept serving version {serving} ({counted}; asked for {blocked.version} by number: "
            f"{by_number}; the follower: {follower.refused.get(blocked.version, 'no refusal recorded')})"
        ),
    )


def files_swapped_after_gating(sb: Sandbox) -> Outcome:
    """One byte of a gated, promoted version's INT8 model, tokenizer or fetched weights changed on the state volume after its gates
    passed."""
    # The sandbox's production is such a version: a clean copy, gated and promoted here before any class ran.
    checked = servable.check(sb.registry, sb.home, sb.production)
    record = checked.record
    swaps: dict[str, tuple[Path, Callable[[bytes], bytes]]] = {
        "the INT8 model": (checked.int8, lambda b: b[:-1] + bytes([b[-1] ^ 1])),
        "the tokenizer": (record.build.merged / "tokenizer.json", lambda b: b + b"\n"),
        "the fetched weights": (weights_file(Path(record.artifact_dir)), lambda b: b[:-1] + bytes([b[-1] ^ 1])),
    }
    pool = _pool(sb)
    refusals = []
    for what, (path, swap) in swaps.items():
        kept = path.read_bytes()
        try:
            path.write_bytes(swap(kept))
            refused, load_refused = _refusal(sb, sb.production), _load_refusal(pool, sb.production.version)
        finally:
            path.write_bytes(kept)
        if refused is None or load_refused is None:
            return Outcome(
                GOT_THROUGH,
                detail=f"{what} changed after gating ({path}) was accepted by {'servable.check' if refused is None else 'the loader'}",
            )
        refusals.append(f"{what}: {refused}")
    restored = _load_refusal(pool, sb.production.version)
    if restored is not None:
        return Outcome(ERROR, detail=f"production does not load once its files are restored: {restored}")
    now = sb.registry.production(sb.name)
    if now != sb.production:
        return Outcome(ERROR, detail=f"production moved to {now.uri if now else 'nothing'}")
    return Outcome(
        NEVER_SERVED, detail="; ".join(refusals) + f"; restored, version {sb.production.version} loads again and stays production"
    )


def _sensor_tick(sb: Sandbox, cursor: str | None):
    from modelcd_assets.defs.sensors.registry_sensor import registry_sensor
    from modelcd_assets.resources.registry import MlflowRegistryResource

    resources = {
        "registry": MlflowRegistryResource(tracking_uri=sb.env["MLFLOW_TRACKING_URI"], artifact_location=sb.env["MODELCD_MLFLOW_ARTIFACTS"])
    }
    return registry_sensor(dg.build_sensor_context(cursor=cursor, instance=sb.instance, resources=resources))


def model_deleted_and_recreated(sb: Sandbox) -> Outcome:
    """A second model gated and promoted, then deleted and re-created with other bytes (production's weights redrawn): version 1 again."""
    name = f"{sb.name}-recreated"  # never the sandbox's model: its production stays
    policies = Path(sb.env["MODELCD_POLICY_DIR"])
    if sb.policy_path.is_file():
        shutil.copy2(sb.policy_path, policy_path(policies, name))
    try:
        old = sb.register(identical(sb.prod, sb.work / "recreated-old"), name)
        run = sb.gate(old)
        if run.outcome != PROMOTED:
            raise ModelcdError(f"{old.uri}, production's files under another name, was not promoted ({run.outcome}: {run.error})")
        envelope = sb.registry.attestation(old)
        cursor = _sensor_tick(sb, None).cursor  # what registry_sensor knew of the model: its creation time, version 1 seen
        sb.registry.client.delete_registered_model(name)
        time.sleep(0.01)  # creation times are in milliseconds
        new = sb.register(random_reinit(sb.prod, sb.work / "recreated-new"), name)
        if new != old:
            raise ModelcdError(f"the re-created model restarted at {new.uri}, not {old.uri}")
        refused = _refusal(sb, new)
        sb.registry.put_attestation(new, envelope)  # the old version's genuine verdict, copied onto the new version 1
        refused_copy = _refusal(sb, new)
        tick = _sensor_tick(sb, cursor)
    finally:
        with contextlib.suppress(Exception):
            sb.registry.client.delete_registered_model(name)
        (policy_path(policies, name)).unlink(missing_ok=True)
    if refused is None or refused_copy is None:
        return Outcome(
            GOT_THROUGH,
            detail=f"servable.check accepted the re-created {new.uri} on the old version's verdict"
            + (" copied over" if refused is not None else ""),
        )
    requested = [r.partition_key for r in tick.run_requests]
    regated = (
        f"registry_sensor gated anew: it requested a run of {new.key} (run key {tick.run_requests[0].run_key})"
        if new.key in requested
        else f"registry_sensor did NOT request {new.key} again ({tick.skip_reason.skip_message if tick.skip_reason else requested})"
    )
    return Outcome(NEVER_SERVED, detail=f"{refused}; with the old verdict copied onto it: {refused_copy}; {regated}")


def attestation_forged_with_another_key(sb: Sandbox) -> Outcome:
    """A verdict over a blocked version's own bytes, with production's gate results, signed with a key pair that is not modelcd's."""
    blocked = sb.blocked_version()
    genuine = servable.check(sb.registry, sb.home, sb.production).verdict
    record = CandidateRecord.of(sb.home, blocked)
    forged = attestation.Verdict(
        sb.name,
        blocked.version,
        servable.subjects(sb.registry, blocked, record),
        genuine.gates,
        genuine.judged_against,
        genuine.policy_sha256,
        "forged by the fault sandbox",
    )
    with tempfile.TemporaryDirectory(dir=sb.work) as tmp:
        other = init_keys(Keys(Path(tmp) / "signing.key", Path(tmp) / "signing.pub"))
        sb.registry.put_attestation(blocked, attestation.sign(forged, other.private, subjects=declaration_of(record.task).subjects))
    refused, load_refused = _refusal(sb, blocked), _load_refusal(_pool(sb), blocked.version)
    if refused is None or load_refused is None:
        return Outcome(
            GOT_THROUGH, detail=f"{'servable.check' if refused is None else 'the loader'} accepted {blocked.uri} on a forged verdict"
        )
    sb.registry.put_attestation(blocked, sb.registry.attestation(sb.production))  # production's genuine verdict, copied over
    copied = _refusal(sb, blocked)
    if copied is None:
        return Outcome(GOT_THROUGH, detail=f"servable.check accepted {blocked.uri} on production's verdict copied over")
    return Outcome(NEVER_SERVED, detail=f"{refused}; production's genuine verdict copied over: {copied}")


def oversized_requests(sb: Sandbox) -> Outcome:
    """Requests over serving.max_body_bytes, max_text_chars and max_texts sent between normal ones to the server of production."""
    limits = _policy(sb).serving
    texts = [ex.text for ex in read_split(split_path(sb.data, "evaluation"))[:8]]
    oversized = [
        {"content": json.dumps({"texts": ["x" * (limits.max_body_bytes + 1)]}).encode(), "headers": {"content-type": "application/json"}},
        {"json": {"texts": [texts[0], "é" * (limits.max_text_chars + 1)]}},
        {"json": {"texts": [texts[0]] * (limits.max_texts + 1)}},
    ]
    rounds, normal, answers = 4, [], []
    with _server(sb) as client:
        before = _samples(client)
        for i in range(rounds):
            for k in range(2):
                normal.append(client.post("/v1/classify", json={"texts": texts[(2 * i + k) % len(texts) :][:4]}).status_code)
            answers += [client.post("/v1/classify", **request) for request in oversized]
        after = _samples(client)
        serving = client.get("/readyz").json().get("version")
    reasons = [r.json().get("reason") if r.status_code in (413, 422) else None for r in answers]
    statuses = sorted({r.status_code for r in answers})
    delta = lambda name, **labels: _total(after, name, model=sb.name, **labels) - _total(before, name, model=sb.name, **labels)  # noqa: E731
    observed, answered = delta("modelcd_request_duration_seconds_count"), delta("modelcd_requests_total")
    if None in reasons or observed > len(normal) or answered > len(normal):
        return Outcome(
            GOT_THROUGH,
            detail=(
                f"oversized requests answered {statuses}; {answered:.0f} requests answered by a version and {observed:.0f} "
                f"observed in the latency histogram for {len(normal)} normal ones"
            ),
        )
    if normal != [200] * len(normal) or serving != sb.production.version or sb.registry.production(sb.name) != sb.production:
        return Outcome(
            ERROR,
            detail=(
                f"normal requests answered {sorted(set(normal))}; the server serves version {serving}; "
                f"production is {sb.registry.production(sb.name)}"
            ),
        )
    counts = {reason: reasons.count(reason) for reason in sorted(set(reasons))}
    counted = all(delta("modelcd_requests_rejected_total", reason=reason) == n for reason, n in counts.items())
    return Outcome(
        REJECTED,
        detail=(
            f"{len(answers)} oversized requests answered {'/'.join(map(str, statuses))} "
            f"({', '.join(f'{k} {v}' for k, v in counts.items())}), "
        )
        + ("counted in modelcd_requests_rejected_total" if counted else "modelcd_requests_rejected_total did NOT count them all")
        + f", none observed in the latency histogram ({observed:.0f} observations, one per normal request); "
        f"{len(normal)} normal requests answered 200 by version {serving}, which stays production",
    )
