"""Verdicts bound to bytes and signed: the registry, the state folder and the alias cannot get a version served without one.

Each test here reproduces a way around the gates that worked before attestations: the alias moved by hand to a blocked
version, files swapped after gating, an attestation forged with another key, a withdrawn version asked for by number.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from mlflow import MlflowClient

from modelcd_assets.cli import main
from modelcd_assets.lib.errors import BadCandidate
from modelcd_assets.lib.judging.policy import Policy
from modelcd_assets.lib.release import attestation, servable
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import PRODUCTION, ROLLED_BACK, CandidateRef
from modelcd_assets.lib.release.signing import Keys, init_keys
from modelcd_assets.lib.tasks.names import declaration_of
from modelcd_assets.serving.classifier.pool import ClassifierPool
from modelcd_assets.serving.server import app_from_env
from modelcd_assets_tests.serving.conftest import ADMIN_TOKEN, MODEL, POLICY, gate_blocked, gated_state, wait_for


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_trained, tiny_adapters):
    mp = pytest.MonkeyPatch()
    yield from gated_state(tmp_path_factory.mktemp("signed-verdicts"), mp, tiny_trained, tiny_adapters)
    mp.undo()


@pytest.fixture(scope="module")
def blocked(served, tiny_adapters):
    return gate_blocked(served, tiny_adapters["worse"])


def _serving():
    return Policy.model_validate(yaml.safe_load(POLICY)).serving


def check(served, ref):
    return servable.check(served.env.registry, served.env.home, ref)


def test_promoted_versions_hold_a_verdict_over_their_bytes_and_blocked_ones_none(served, blocked):
    ok = check(served, served.v2)
    assert ok.verdict.version == served.v2.version and ok.verdict.judged_against["version"] == served.v1.version
    assert {g["gate"] for g in ok.verdict.gates} >= {"accuracy_within_tolerance", "int8_agrees_with_fp32", "artifact_is_safe"}
    assert set(ok.verdict.subjects) == set(declaration_of(ok.record.task).subjects)
    assert attestation.local_path(served.env.home, MODEL, served.v2.version).is_file()
    with pytest.raises(servable.NotServable, match="no valid verdict.*no attestation"):
        check(served, blocked)
    with pytest.raises(servable.NotServable, match="no gated build"):
        check(served, served.ungated)


def test_the_alias_moved_by_hand_to_a_blocked_version_never_changes_what_is_served(served, blocked, capsys):
    client = MlflowClient(tracking_uri=served.env.env["MLFLOW_TRACKING_URI"])
    with TestClient(app_from_env(MODEL, environ={**served.env.env, "MODELCD_ADMIN_TOKEN": ADMIN_TOKEN})) as c:
        wait_for(lambda: c.get("/readyz").status_code == 200, "serving production")
        assert c.get("/readyz").json()["version"] == served.v2.version
        try:
            client.set_registered_model_alias(MODEL, PRODUCTION, blocked.version)  # anyone who can write the registry
            follower = c.app.state.follower
            wait_for(lambda: blocked.version in follower.refused, "the follower refusing the blocked version")
            assert "no valid verdict" in follower.refused[blocked.version]
            assert c.get("/readyz").json()["version"] == served.v2.version
            r = c.post("/v1/classify", json={"texts": ["where is my parcel"]})
            assert r.status_code == 200 and r.json()["version"] == served.v2.version
            r = c.post("/v1/classify", json={"texts": ["where is my parcel"], "adapter": blocked.version})
            assert r.status_code == 404 and blocked.version in r.json()["error"]
            metrics = c.get("/metrics").text
            assert f'modelcd_alias_refused{{model="{MODEL}",version="{blocked.version}"}} 1.0' in metrics
            capsys.readouterr()
            assert main(["status", MODEL]) == 0
            status = capsys.readouterr().out
            assert f"{MODEL}: production = {blocked.version} (not servable: no valid verdict;" in status
            assert main(["verdict", MODEL, blocked.version]) == 3
            assert "not servable: no valid verdict" in capsys.readouterr().out
            assert main(["verdict", MODEL, served.v2.version, "--json"]) == 0
            assert json.loads(capsys.readouterr().out)["servable"] is True
        finally:
            client.set_registered_model_alias(MODEL, PRODUCTION, served.v2.version)


def test_files_swapped_after_gating_are_refused_by_the_loader(served):
    pool = ClassifierPool(MODEL, served.env.registry, served.env.home, _serving())
    record = check(served, served.v1).record
    int8 = record.chosen_int8()
    kept = int8.read_bytes()
    try:
        int8.write_bytes(kept[:-1] + bytes([kept[-1] ^ 1]))
        with pytest.raises(Exception, match="int8-model differ from what was judged"):
            pool.load(served.v1.version)
    finally:
        int8.write_bytes(kept)
    config = Path(record.artifact_dir) / "adapter_config.json"
    original = config.read_text()
    try:
        config.write_text(original.replace("}", ' , "x": 1}', 1) if original.rstrip().endswith("}") else original + " ")
        with pytest.raises(Exception, match="adapter_config.json"):
            pool.load(served.v1.version)
    finally:
        config.write_text(original)
    assert pool.load(served.v1.version).version == served.v1.version


def test_an_attestation_forged_with_another_key_is_refused(served, blocked, tmp_path):
    other = init_keys(Keys(tmp_path / "other.key", tmp_path / "other.pub"))
    good = check(served, served.v2).verdict
    record = CandidateRecord.of(served.env.home, blocked)
    forged = attestation.Verdict(
        MODEL,
        blocked.version,
        servable.subjects(served.env.registry, blocked, record),
        good.gates,
        good.judged_against,
        good.policy_sha256,
        "forged",
    )
    served.env.registry.put_attestation(blocked, attestation.sign(forged, other.private, subjects=declaration_of(record.task).subjects))
    with pytest.raises(servable.NotServable, match="does not verify with the public key"):
        check(served, blocked)
    # Another version's genuine attestation copied over is about other bytes and another version.
    served.env.registry.put_attestation(blocked, json.loads(attestation.local_path(served.env.home, MODEL, served.v2.version).read_text()))
    with pytest.raises(servable.NotServable, match=f"about {MODEL}/{served.v2.version}, not {MODEL}/{blocked.version}"):
        check(served, blocked)


def test_a_withdrawn_version_is_not_answered_by_number(served):
    with TestClient(app_from_env(MODEL, environ={**served.env.env, "MODELCD_ADMIN_TOKEN": ADMIN_TOKEN})) as c:
        wait_for(lambda: c.get("/readyz").status_code == 200, "serving production")
        c.app.state.pool.load(served.v1.version)
        assert c.post("/v1/classify", json={"texts": ["hi"], "adapter": served.v1.version}).status_code == 200
        served.env.registry.set_tags(served.v1, {ROLLED_BACK: json.dumps({"why": "test"})})
        try:
            wait_for(
                lambda: c.post("/v1/classify", json={"texts": ["hi"], "adapter": served.v1.version}).status_code == 404,
                "the withdrawn version answering 404",
            )
            body = c.post("/v1/classify", json={"texts": ["hi"], "adapter": served.v1.version}).json()
            assert served.v2.version not in body["error"].replace(f"version {served.v1.version}", "")  # nothing loaded is listed
            with pytest.raises(servable.NotServable, match="withdrawn"):
                check(served, served.v1)
        finally:
            served.env.registry.client.delete_model_version_tag(MODEL, served.v1.version, ROLLED_BACK)


def test_a_re_created_model_holds_no_verdict_under_its_old_numbers(modelcd_env, tiny_base, tiny_trained, tmp_path):
    reg = modelcd_env.registry
    ref = reg.register(tiny_base, "recreated")
    local = reg.fetch(ref, tmp_path / "old")
    assert reg.verify_local(ref, local)
    reg.client.delete_registered_model("recreated")
    assert reg.register(tiny_trained, "recreated") == CandidateRef("recreated", "1")
    with pytest.raises(BadCandidate, match="do not match their signature"):
        reg.verify_local(ref, local)  # the old copy, and any verdict about it, no longer stands for version 1
    shutil.rmtree(local)
