"""The serving app in process: readiness, classification, the admin API and its gate check, refused loads, fault injection
and following the alias."""

from __future__ import annotations

import shutil
import time

import dagster as dg
import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from modelcd_assets.lib.hashing import file_sha256
from modelcd_assets.lib.inference.runtime import logits, session
from modelcd_assets.lib.inference.tokens import encode
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import CONTENT
from modelcd_assets.serving import ARTIFACT_HEADER, HASH_HEADER, VERSION_HEADER
from modelcd_assets.serving.server import app_from_env
from modelcd_assets_tests.conftest import TEST_LOCK
from modelcd_assets_tests.serving.conftest import ADMIN_TOKEN, MODEL, gate_blocked, gated_state, samples

TEXTS = ["I was charged twice on my invoice", "the app crashes when I log in", "where is my parcel", "reset my password please"]
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_trained, tiny_adapters):
    mp = pytest.MonkeyPatch()
    yield from gated_state(tmp_path_factory.mktemp("serving-app"), mp, tiny_trained, tiny_adapters)
    mp.undo()


def start(served, model: str = MODEL, **flags) -> TestClient:
    """The app as `modelcd serve` builds it: a version gets in only with a valid signed verdict over its bytes."""
    return TestClient(app_from_env(model, environ={**served.env.env, "MODELCD_ADMIN_TOKEN": ADMIN_TOKEN}, **flags))


def admin(client: TestClient) -> TestClient:
    """The admin API of the server client talks to: the same pool, served apart (in `modelcd serve`, on its own port)."""
    return TestClient(client.app.state.admin_app)


def wait_serving(client: TestClient, version: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = client.get("/readyz")
        if r.status_code == 200 and r.json()["version"] == version:
            return r.json()
        time.sleep(0.1)
    raise AssertionError(f"not serving {version} after {timeout} s: {client.get('/readyz').json()}")


@pytest.fixture(scope="module")
def client(served):
    with start(served, chaos=True) as c:
        wait_serving(c, served.v2.version)
        yield c


@pytest.fixture(scope="module")
def failed(served, tiny_adapters):
    """A version gated and blocked by its accuracy gate: it has a build, but did not pass."""
    return gate_blocked(served, tiny_adapters["worse"])


def record_of(served, ref) -> CandidateRecord:
    return CandidateRecord.of(served.env.home, ref)


def gated_logits(served, ref) -> np.ndarray:
    """The gated INT8 artifact run directly, one text per call: what the server must answer, to the bit."""
    record = record_of(served, ref)
    return gated_logits_of(record.chosen_int8(), record)


def gated_logits_of(artifact, record) -> np.ndarray:
    return np.concatenate([logits(session(artifact, threads=1), encode(record.build.merged, [t])) for t in TEXTS])


def content(served, ref) -> str:
    return served.env.registry.tags(ref)[CONTENT]


def test_an_unknown_model_is_refused_at_start(served):
    from modelcd_assets.lib.errors import ModelcdError

    with pytest.raises(ModelcdError, match="'no-such-model' is not a registered candidate model"):
        start(served, "no-such-model")


def test_not_ready_without_a_production_version(served, tiny_adapters):
    served.env.registry.register(tiny_adapters["good"], "unpromoted-intent")
    with start(served, "unpromoted-intent") as c:
        assert c.get("/healthz").status_code == 200
        r = c.get("/readyz")
        assert r.status_code == 503 and "no production version" in r.json()["reason"]
        assert c.post("/v1/classify", json={"texts": ["hi"]}).status_code == 503


def test_classify_is_served_by_the_gated_int8_artifact_with_its_hash(served, client):
    r = client.post("/v1/classify", json={"texts": TEXTS})
    assert r.status_code == 200
    assert r.headers[VERSION_HEADER] == served.v2.version
    assert r.headers[HASH_HEADER] == content(served, served.v2)
    # The artifact hash in the header is the one quantized_model recorded, and the bytes on disk have it.
    [event] = served.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("quantized_model"), asset_partitions=[served.v2.key]), limit=1
    ).records
    recorded = event.asset_materialization.metadata["artifact_sha256"].value
    assert r.headers[ARTIFACT_HEADER] == recorded == file_sha256(record_of(served, served.v2).chosen_int8())
    assert r.json()["artifact_sha256"] == r.headers[ARTIFACT_HEADER]
    assert np.array_equal(np.array([p["logits"] for p in r.json()["predictions"]], dtype=np.float32), gated_logits(served, served.v2))


def test_the_open_inference_protocol_answers_what_classify_answers(served, client):
    """KServe V2 beside /v1/classify, on the same version, verdict and limits; JSON tensors here, binary ones below."""
    ask = {"id": "r1", "inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(TEXTS)], "data": TEXTS}]}
    r = client.post(f"/v2/models/{MODEL}/infer", json=ask)
    assert r.status_code == 200 and r.headers[VERSION_HEADER] == served.v2.version, r.text
    body = r.json()
    assert (body["model_name"], body["model_version"], body["id"]) == (MODEL, served.v2.version, "r1")
    logits, labels = (next(o for o in body["outputs"] if o["name"] == n) for n in ("logits", "label"))
    expected = gated_logits(served, served.v2)
    assert logits["datatype"] == "FP32" and logits["shape"] == list(expected.shape)
    assert np.array_equal(np.asarray(logits["data"], np.float32).reshape(expected.shape), expected)
    classified = client.post("/v1/classify", json={"texts": TEXTS}).json()
    assert labels["data"] == [p["label"] for p in classified["predictions"]] and labels["datatype"] == "BYTES"
    meta = client.get(f"/v2/models/{MODEL}").json()
    assert meta["outputs"][0]["parameters"]["labels"] == classified["labels"] and meta["inputs"][0]["datatype"] == "BYTES"
    assert served.v2.version in meta["versions"]
    assert client.get(f"/v2/models/{MODEL}/versions/{served.v2.version}/ready").json()["ready"] is True
    assert client.get("/v2/health/ready").json() == {"ready": True} and client.get("/v2/health/live").json() == {"live": True}
    for path, bad, status, words in (
        ("/v2/models/another/infer", ask, 404, "not served here"),
        (f"/v2/models/{MODEL}/versions/99/infer", ask, 404, "version 99"),
        (f"/v2/models/{MODEL}/infer", ask | {"parameters": {"priority": 1}}, 400, "'priority' is not served"),
        (
            f"/v2/models/{MODEL}/infer",
            ask | {"outputs": [{"name": "logits", "parameters": {"classification": 2}}]},
            400,
            "'classification'",
        ),
        (f"/v2/models/{MODEL}/infer", ask | {"outputs": [{"name": "probabilities"}]}, 400, "'probabilities' is not one"),
        (f"/v2/models/{MODEL}/infer", {"inputs": [{"name": "text", "datatype": "INT64", "shape": [1], "data": [1]}]}, 400, "BYTES"),
        (f"/v2/models/{MODEL}/infer", {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2], "data": ["a"]}]}, 400, "takes 2"),
    ):
        r = client.post(path, json=bad)
        assert r.status_code == status and words in r.json()["error"], (path, r.status_code, r.text)


def test_tritonclient_the_protocols_reference_client_gets_the_gated_logits(served, tmp_path):
    import tritonclient.http as triton
    from tritonclient.utils import InferenceServerException

    from modelcd_assets_tests.serving.conftest import ready_server

    with ready_server(served.env, tmp_path / "server.log", served.v2.version) as proc:
        client = triton.InferenceServerClient(url=proc.url.removeprefix("http://"))
        assert client.is_server_live() and client.is_server_ready() and client.is_model_ready(MODEL)
        assert "binary_tensor_data" in client.get_server_metadata()["extensions"]
        expected = gated_logits(served, served.v2)
        classified = [p["label"] for p in httpx.post(f"{proc.url}/v1/classify", json={"texts": TEXTS}, timeout=60).json()["predictions"]]
        for binary in (True, False):  # the binary tensor data extension, tritonclient's default, and JSON
            text = triton.InferInput("text", [len(TEXTS)], "BYTES")
            text.set_data_from_numpy(np.array([t.encode() for t in TEXTS], dtype=np.object_), binary_data=binary)
            outputs = [triton.InferRequestedOutput("logits", binary_data=binary), triton.InferRequestedOutput("label", binary_data=binary)]
            result = client.infer(MODEL, [text], outputs=outputs, model_version=served.v2.version)
            assert np.array_equal(result.as_numpy("logits"), expected), binary
            labels = [x.decode() if isinstance(x, bytes) else x for x in result.as_numpy("label")]
            assert labels == classified, binary  # the same answers as /v1/classify
        default = client.infer(MODEL, [text])  # no outputs named: both, in binary (tritonclient asks binary_data_output)
        assert np.array_equal(default.as_numpy("logits"), expected)
        many = triton.InferInput("text", [100], "BYTES")
        many.set_data_from_numpy(np.array([b"hi"] * 100, dtype=np.object_))
        with pytest.raises(InferenceServerException, match="serving.max_texts"):
            client.infer(MODEL, [many])
        with pytest.raises(InferenceServerException, match="not served here"):
            client.infer("another-model", [text])
        client.close()


def test_the_public_app_has_no_admin_routes(client):
    """The admin API used to share the public port, where anyone who could classify could also try the token."""
    assert client.get("/v1/admin/adapters", headers=AUTH).status_code == 404
    assert client.post("/v1/admin/adapters", json={"version": "1"}, headers=AUTH).status_code == 404
    assert client.post("/v1/admin/faults", json={"version": "1"}, headers=AUTH).status_code == 404
    assert not [p for p in client.app.openapi()["paths"] if p.startswith("/v1/admin")]
    assert {p for p in admin(client).app.openapi()["paths"]} >= {"/v1/admin/adapters", "/v1/admin/faults"}


def test_admin_api_needs_the_bearer_token(client):
    assert admin(client).get("/v1/admin/adapters").status_code == 401
    r = admin(client).post("/v1/admin/adapters", json={"version": "1"}, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert admin(client).get("/v1/admin/adapters", headers=AUTH).status_code == 200


def test_a_request_can_name_a_loaded_adapter(served, client):
    r = admin(client).post("/v1/admin/adapters", json={"version": served.v1.version, "activate": False}, headers=AUTH)
    assert r.status_code == 200, r.text
    consistency = r.json()["loaded"]["consistency"]
    assert consistency["max_abs_logit_diff"] <= 1e-4 and consistency["top1_agreement"] == 1.0
    assert r.json()["serving"] == served.v2.version
    named = client.post("/v1/classify", json={"texts": TEXTS, "adapter": served.v1.version})
    assert named.headers[HASH_HEADER] == content(served, served.v1)
    assert np.array_equal(np.array([p["logits"] for p in named.json()["predictions"]], dtype=np.float32), gated_logits(served, served.v1))
    default = client.post("/v1/classify", json={"texts": TEXTS})
    assert default.headers[HASH_HEADER] == content(served, served.v2)
    assert client.post("/v1/classify", json={"texts": TEXTS, "adapter": "99"}).status_code == 404


def test_an_unknown_adapter_is_named_but_the_loaded_versions_are_not(served, client):
    """The 404 used to list every loaded version to any client; which versions are loaded is the admin API's to say."""
    r = client.post("/v1/classify", json={"texts": TEXTS, "adapter": "99"})
    assert r.status_code == 404
    assert r.json()["error"] == f"version 99 of {MODEL} is not served here"
    assert "loaded" not in r.text and f"'{served.v2.version}'" not in r.text


def test_a_never_gated_version_is_refused_and_the_old_adapter_keeps_serving(served):
    with start(served, chaos=True) as client:
        wait_serving(client, served.v2.version)
        _refused_and_still_serving(served, client)


def _refused_and_still_serving(served, client):
    r = admin(client).post("/v1/admin/adapters", json={"version": served.ungated.version}, headers=AUTH)
    assert r.status_code == 409, r.text
    assert r.json()["error"].startswith(f"not servable: no valid verdict for {served.ungated.uri}: it has no gated build")
    assert r.json()["serving"] == served.v2.version
    assert client.post("/v1/classify", json={"texts": TEXTS}).headers[HASH_HEADER] == content(served, served.v2)
    assert (
        samples(client.get("/metrics").text)[("modelcd_adapter_swaps_total", frozenset({"model": MODEL, "outcome": "refused"}.items()))]
        >= 1
    )


def test_a_version_whose_gate_failed_is_neither_loaded_nor_activated(served, client, failed):
    r = admin(client).post("/v1/admin/adapters", json={"version": failed.version}, headers=AUTH)
    assert r.status_code == 409, r.text
    assert (
        r.json()["error"]
        == f"not servable: no valid verdict for {failed.uri}: it has no attestation (only versions promoted through every gate get one)"
    )
    assert r.json()["serving"] == served.v2.version
    r = admin(client).post(f"/v1/admin/adapters/{failed.version}/activate", headers=AUTH)  # never loaded, so nothing to activate
    assert r.status_code == 404 and r.json()["error"] == f"version {failed.version} of {MODEL} is not served here"
    listed = admin(client).get("/v1/admin/adapters", headers=AUTH).json()
    assert failed.version not in [s["version"] for s in listed["loaded"]] and listed["default"] == served.v2.version


def test_there_is_no_way_to_serve_without_a_verdict():
    """--allow-ungated let the admin API load versions that had not passed their gates; with signed verdicts there is no such switch."""
    from modelcd_assets.cli import parser

    with pytest.raises(SystemExit):
        parser().parse_args(["serve", MODEL, "--allow-ungated"])


def test_fault_injection_exists_only_with_chaos(served, client):
    with start(served) as c:
        wait_serving(c, served.v2.version)
        assert admin(c).post("/v1/admin/faults", json={"version": served.v2.version, "error_ratio": 1.0}, headers=AUTH).status_code == 404
        assert "/v1/admin/faults" not in admin(c).app.openapi()["paths"]
        assert c.post("/v1/classify", json={"texts": TEXTS}).status_code == 200
    assert admin(client).post("/v1/admin/faults", json={"version": served.v2.version}, headers=AUTH).json() == {"faults": {}}


def test_unloading_the_default_version_is_refused(served, client):
    r = admin(client).delete(f"/v1/admin/adapters/{served.v2.version}", headers=AUTH)
    assert r.status_code == 409 and "activate another version" in r.json()["error"]


def test_the_server_follows_the_production_alias(served, client):
    reg = served.env.registry
    reg.move_production(served.v1, {"test": "alias moved by hand"}, expected=reg.production(MODEL), lock=TEST_LOCK)
    try:
        assert wait_serving(client, served.v1.version, timeout=10)["adapter_sha256"] == content(served, served.v1)
    finally:
        reg.move_production(served.v2, {"test": "alias moved back"}, expected=reg.production(MODEL), lock=TEST_LOCK)
    wait_serving(client, served.v2.version, timeout=10)


def test_metrics_count_requests_errors_and_nan_outputs(served, client):
    v = served.v2.version
    r = admin(client).post("/v1/admin/faults", json={"version": v, "nan_ratio": 1.0}, headers=AUTH)
    assert r.status_code == 200
    try:
        bad = client.post("/v1/classify", json={"texts": TEXTS})
        assert bad.status_code == 500 and "non-finite" in bad.json()["error"]
    finally:
        admin(client).post("/v1/admin/faults", json={"version": v}, headers=AUTH)
    assert client.post("/v1/classify", json={"texts": TEXTS}).status_code == 200
    exported = samples(client.get("/metrics").text)
    labels = {"model": MODEL, "version": v, "adapter": content(served, served.v2)[:12]}
    assert exported[("modelcd_nan_outputs_total", frozenset(labels.items()))] == 1
    assert exported[("modelcd_request_errors_total", frozenset(labels.items()))] == 1
    assert exported[("modelcd_requests_total", frozenset(labels.items()))] >= 3
    assert exported[("modelcd_request_duration_seconds_bucket", frozenset({**labels, "le": "+Inf"}.items()))] >= 3
    # Every answered request, failed or not, is priced: its share of the node's time at cost.node_usd_per_hour.
    requests = exported[("modelcd_requests_total", frozenset(labels.items()))]
    assert exported[("modelcd_request_cost_usd_count", frozenset(labels.items()))] == requests
    assert exported[("modelcd_request_cost_usd_sum", frozenset(labels.items()))] > 0
    assert sum(value for (name, _), value in exported.items() if name == "modelcd_adapter_swap_duration_seconds_count") >= 1


@pytest.mark.parametrize("tamper", ["artifact", "recorded_outputs"])
def test_a_swap_is_refused_unless_the_artifact_and_its_outputs_are_the_gated_ones(served, tamper):
    import json

    record = record_of(served, served.v1)
    other = record_of(served, served.v2)
    target = record.chosen_int8() if tamper == "artifact" else record.files.quantization
    backup = target.with_suffix(".bak")
    shutil.copy2(target, backup)
    if tamper == "artifact":  # v1's INT8 file replaced by v2's: a build folder edited after gating
        shutil.copy2(other.chosen_int8(), target)
        why, status = "int8-model differ from what was judged", 409  # no valid verdict covers these bytes
    else:  # the recorded outputs no longer match what the artifact computes
        gated = json.loads(target.read_text())
        gated["probe"]["logits"] = (np.asarray(gated["probe"]["logits"]) + 0.01).tolist()
        target.write_text(json.dumps(gated))
        why, status = "disagree", 422  # the attested bytes, but the probe does not reproduce the gated outputs
    try:
        with start(served) as c:
            wait_serving(c, served.v2.version)
            r = admin(c).post("/v1/admin/adapters", json={"version": served.v1.version}, headers=AUTH)
            assert r.status_code == status and why in r.json()["error"], r.text
            assert r.json()["serving"] == served.v2.version
            assert c.post("/v1/classify", json={"texts": TEXTS}).headers[HASH_HEADER] == content(served, served.v2)
    finally:
        backup.replace(target)


def test_the_session_runs_the_bytes_that_were_hashed_even_if_the_file_changes_after_the_check(served, monkeypatch):
    """The server used to hash the artifact file, then open the file again by path: a file replaced in between served unchecked bytes."""
    from modelcd_assets.lib.hashing import bytes_sha256
    from modelcd_assets.serving.classifier import pool as pool_module

    record = record_of(served, served.v1)
    artifact = record.chosen_int8()
    backup = artifact.with_suffix(".bak")
    shutil.copy2(artifact, backup)

    def hash_then_replace(data: bytes) -> str:
        digest = bytes_sha256(data)
        shutil.copy2(record_of(served, served.v2).chosen_int8(), artifact)  # swapped right after the check
        return digest

    try:
        with start(served) as c:
            wait_serving(c, served.v2.version)
            monkeypatch.setattr(pool_module, "bytes_sha256", hash_then_replace)  # for v1's load only
            r = admin(c).post("/v1/admin/adapters", json={"version": served.v1.version}, headers=AUTH)
            assert r.status_code == 200, r.text  # the probe passed: what serves is v1's gated bytes, not the file now on disk
            got = c.post("/v1/classify", json={"texts": TEXTS, "adapter": served.v1.version}).json()
            assert np.allclose([p["logits"] for p in got["predictions"]], gated_logits_of(backup, record), atol=1e-5)
    finally:
        backup.replace(artifact)


def test_modelcd_rollback_by_hand_moves_production_back_and_the_server_follows(served, client, capsys):
    from modelcd_assets.cli import main
    from modelcd_assets.lib.release.registry import ROLLED_BACK

    assert served.env.registry.production(MODEL) == served.v2
    assert main(["rollback", MODEL, "--reason", "canary looked wrong"]) == 0
    assert f"rolled back from {served.v2.version} to {served.v1.version}" in capsys.readouterr().out
    assert served.env.registry.production(MODEL) == served.v1
    assert "canary looked wrong" in served.env.registry.tags(served.v2)[ROLLED_BACK]
    wait_serving(client, served.v1.version, timeout=10)
    assert main(["status", MODEL]) == 0
    status = capsys.readouterr().out
    assert "production = 1" in status and "rolled back from" in status
    # Nothing earlier than v1 passed its gates: a second rollback is refused and production stays.
    assert main(["rollback", MODEL]) == 2
    assert "no earlier version of tiny-intent passed its gates" in capsys.readouterr().err
    assert served.env.registry.production(MODEL) == served.v1


def test_the_serving_process_imports_neither_torch_nor_dagster(served):
    """What `modelcd serve` imports, and a version loaded, probed and run: no torch, transformers, peft or Dagster in sys.modules."""
    import json
    import os
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from modelcd_assets.cli import parser\n"
        "from modelcd_assets.serving.server import app_from_env\n"
        "import uvicorn, mlflow\n"
        "pool = app_from_env(sys.argv[1]).state.pool\n"
        "pool.activate(pool.load(sys.argv[2]).version)\n"
        "assert pool.active.logits(['where is my parcel']).shape == (1, 4)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'dagster', 'transformers', 'peft'})))\n"
    )
    production = served.env.registry.production(MODEL).version  # v2 may have been rolled back (withdrawn) by an earlier test
    done = subprocess.run(
        [sys.executable, "-c", script, MODEL, production], env={**os.environ, **served.env.env}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_loaded_versions_are_bounded_least_recently_used_first(served):
    from modelcd_assets.lib.judging.policy import ServingPolicy
    from modelcd_assets.lib.release.registry import ROLLED_BACK
    from modelcd_assets.serving.classifier.pool import ClassifierPool

    reg = served.env.registry
    withdrawn = ROLLED_BACK in reg.tags(served.v2)  # an earlier test may have rolled production back from v2
    if withdrawn:
        kept = reg.tags(served.v2)[ROLLED_BACK]
        reg.client.delete_model_version_tag(MODEL, served.v2.version, ROLLED_BACK)
    try:
        pool = ClassifierPool(MODEL, reg, served.env.home, ServingPolicy(max_loaded_versions=1))
        pool.activate(pool.load(served.v1.version).version)
        assert pool.load(served.v2.version).evicted == ()  # the default and the version just loaded always stay
        pool.activate(served.v2.version)
        assert [s.version for s in pool.loaded()] == [served.v1.version, served.v2.version]
        pool.activate(pool.load(served.v1.version).version)  # v1 is the default again: v2 is the least recently used
        assert [s.version for s in pool.loaded()] == [served.v1.version, served.v2.version]
        pool.unload(served.v2.version)
        assert pool.load(served.v2.version).evicted == ()
        # A third loaded version pushes out the least recently used one that is neither the default nor the one just loaded.
        third = pool._loaded[served.v1.version]
        pool._loaded["99"] = third
        pool.activate(served.v2.version)
        pool.resolve(served.v1.version)  # v1 used after 99 was added: 99 is now the least recently used
        pool._loaded.move_to_end("99", last=False)
        assert pool._evict(keep=served.v1.version) == ("99",)
        assert [s.version for s in pool.loaded()] == [served.v1.version, served.v2.version]
    finally:
        if withdrawn:
            reg.set_tags(served.v2, {ROLLED_BACK: kept})
