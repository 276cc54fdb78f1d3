"""Signed verdicts: what an attestation says, who can have written it, and which bytes it covers."""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest

from modelcd_assets.lib.errors import BadCandidate, ModelcdError
from modelcd_assets.lib.layout import StateLayout
from modelcd_assets.lib.release import attestation
from modelcd_assets.lib.release.signing import BadSignature, Keys, MissingKey, init_keys, sign_envelope, sign_folder, verify_folder

CLASSIFIER = ("registered-files", "int8-model", "tokenizer", "calibration-set")  # the classifier task's subjects
LM = ("registered-files", "int8-model", "adapter-file", "tokenizer")  # the causal LM's
DIGESTS = {name: f"{i:x}" * 64 for i, name in enumerate(CLASSIFIER, start=1)}
GATES = [{"gate": "accuracy_within_tolerance", "verdict": "pass", "measured": "0.91", "threshold": "0.90", "reason": ""}]


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    return init_keys(Keys(tmp_path_factory.mktemp("k") / "keys" / "signing.key", tmp_path_factory.mktemp("k") / "signing.pub"))


@pytest.fixture(scope="module")
def other(tmp_path_factory):
    root = tmp_path_factory.mktemp("other")
    return init_keys(Keys(root / "o.key", root / "o.pub"))


def verdict(**kw) -> attestation.Verdict:
    fields = dict(
        model="m",
        version="3",
        subjects=dict(DIGESTS),
        gates=list(GATES),
        judged_against={"version": "2", "registered-files": "ab" * 32},
        policy_sha256=attestation.policy_sha256({"accuracy": {"tolerance_points": 0.3}}),
        run_id="run-1",
    )
    return attestation.Verdict(**{**fields, **kw})


def test_a_signed_verdict_round_trips_as_an_in_toto_statement_in_a_dsse_envelope(keys):
    envelope = attestation.sign(verdict(), keys.private, subjects=CLASSIFIER)
    assert envelope["payloadType"] == "application/vnd.in-toto+json" and len(envelope["signatures"]) == 1
    stmt = json.loads(base64.b64decode(envelope["payload"]))
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    assert stmt["predicateType"] == attestation.PREDICATE_TYPE
    assert [s["name"] for s in stmt["subject"]] == list(CLASSIFIER)
    assert {s["name"]: s["digest"]["sha256"] for s in stmt["subject"]} == DIGESTS
    assert stmt["predicate"]["promotable"] is True and stmt["predicate"]["gates"] == GATES
    assert stmt["predicate"]["judgedAgainst"] == {"version": "2", "registered-files": "ab" * 32}
    assert attestation.verify(envelope, keys.public, "m/3") == verdict()


def test_a_verdict_needs_every_subject(keys):
    with pytest.raises(ValueError, match="missing: tokenizer"):
        attestation.sign(
            verdict(subjects={k: v for k, v in DIGESTS.items() if k != attestation.TOKENIZER}), keys.private, subjects=CLASSIFIER
        )


LM_DIGESTS = {
    attestation.REGISTERED_FILES: "11" * 32,
    attestation.INT8_MODEL: "22" * 32,
    attestation.ADAPTER_FILE: "33" * 32,
    attestation.TOKENIZER: "44" * 32,
}


def test_a_causal_lm_verdict_is_over_the_int8_base_and_the_adapter_file_without_a_calibration_set(keys):
    envelope = attestation.sign(verdict(subjects=dict(LM_DIGESTS)), keys.private, subjects=LM)
    stmt = json.loads(base64.b64decode(envelope["payload"]))
    assert [s["name"] for s in stmt["subject"]] == ["registered-files", "int8-model", "tokenizer", "adapter-file"]
    assert attestation.verify(envelope, keys.public, "m/3").subjects == LM_DIGESTS
    with pytest.raises(ValueError, match="missing: tokenizer"):
        attestation.sign(verdict(subjects={k: v for k, v in LM_DIGESTS.items() if k != attestation.TOKENIZER}), keys.private, subjects=LM)
    with pytest.raises(ValueError, match="missing: int8-model"):
        attestation.sign(verdict(subjects={**LM_DIGESTS, attestation.INT8_MODEL: ""}), keys.private, subjects=LM)
    with pytest.raises(ValueError, match="names subjects no reader hashes: calibration-set"):
        attestation.sign(verdict(subjects={**LM_DIGESTS, attestation.CALIBRATION_SET: "55" * 32}), keys.private, subjects=LM)
    with pytest.raises(ValueError, match="names subjects no reader hashes: extra"):
        attestation.sign(verdict(subjects={**DIGESTS, "extra": "66" * 32}), keys.private, subjects=CLASSIFIER)


def test_an_envelope_signed_with_another_key_or_altered_is_refused(keys, other):
    forged = attestation.sign(verdict(), other.private, subjects=CLASSIFIER)
    with pytest.raises(BadSignature, match="does not verify with the public key"):
        attestation.verify(forged, keys.public, "m/3")
    genuine = attestation.sign(verdict(), keys.private, subjects=CLASSIFIER)
    stmt = json.loads(base64.b64decode(genuine["payload"]))
    stmt["subject"][1]["digest"]["sha256"] = "00" * 32  # point the verdict at other INT8 bytes
    altered = {**genuine, "payload": base64.b64encode(json.dumps(stmt).encode()).decode()}
    with pytest.raises(BadSignature, match="does not verify"):
        attestation.verify(altered, keys.public, "m/3")
    with pytest.raises(BadSignature, match="does not verify"):
        attestation.verify({"payload": "", "payloadType": attestation.PAYLOAD_TYPE, "signatures": []}, keys.public, "m/3")
    assert issubclass(BadSignature, BadCandidate)


def test_a_signed_statement_that_is_not_a_passing_modelcd_verdict_is_refused(keys):
    def signed(stmt: dict, payload_type: str = attestation.PAYLOAD_TYPE) -> dict:
        return sign_envelope(stmt, payload_type, keys.private)

    good = attestation.statement(verdict(), CLASSIFIER)
    with pytest.raises(BadSignature, match="not a modelcd verdict"):
        attestation.verify(signed({**good, "predicateType": "https://slsa.dev/provenance/v1"}), keys.public, "m/3")
    with pytest.raises(BadSignature, match="not a modelcd verdict"):
        attestation.verify(signed(good, "application/json"), keys.public, "m/3")
    with pytest.raises(BadSignature, match="does not say it passed"):
        attestation.verify(signed({**good, "predicate": {**good["predicate"], "promotable": False}}), keys.public, "m/3")


def test_problems_name_every_subject_that_differs_and_another_version():
    v = verdict()
    assert attestation.problems(v, "m", "3", DIGESTS) == []
    assert attestation.problems(v, "m", "3", {attestation.INT8_MODEL: DIGESTS[attestation.INT8_MODEL]}) == []
    found = attestation.problems(v, "m", "4", {**DIGESTS, attestation.INT8_MODEL: "ee" * 32, attestation.TOKENIZER: ""})
    assert found == [
        "the attestation is about m/3, not m/4",
        f"int8-model differ from what was judged (sha256 {'ee' * 6} != attested {DIGESTS[attestation.INT8_MODEL][:12]})",
        f"tokenizer differ from what was judged (sha256 unknown != attested {DIGESTS[attestation.TOKENIZER][:12]})",
    ]
    assert attestation.problems(verdict(gates=[]), "m", "3", DIGESTS) == ["the attestation lists no gate results"]
    assert attestation.problems(verdict(), "other", "3", {}) == ["the attestation is about m/3, not other/3"]


def test_policy_hash_ignores_key_order_and_sees_values():
    assert attestation.policy_sha256({"a": 1, "b": {"c": 2}}) == attestation.policy_sha256({"b": {"c": 2}, "a": 1})
    assert attestation.policy_sha256({"a": 1}) != attestation.policy_sha256({"a": 2})


def test_local_copies_live_under_the_state_folder(tmp_path, keys):
    envelope = attestation.sign(verdict(), keys.private, subjects=CLASSIFIER)
    path = attestation.write_local(tmp_path, "m", "3", envelope)
    assert path == StateLayout(tmp_path).attestation("m", "3") and path.is_relative_to(tmp_path)
    assert attestation.verify(json.loads(path.read_text()), keys.public, "m/3") == verdict()


def test_keys_init_makes_a_private_key_only_its_owner_reads_and_refuses_to_replace_one(tmp_path):
    keys = init_keys(Keys(tmp_path / "keys" / "signing.key", tmp_path / "keys" / "signing.pub"))
    assert stat.S_IMODE(os.stat(keys.private).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(keys.private.parent).st_mode) == 0o700
    assert keys.public.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    before = keys.private.read_bytes()
    with pytest.raises(ModelcdError, match="already exists"):
        init_keys(keys)
    assert keys.private.read_bytes() == before
    init_keys(keys, force=True)
    assert keys.private.read_bytes() != before


def test_keys_come_from_the_environment_or_the_state_folder(tmp_path):
    assert Keys.from_env({"MODELCD_HOME": str(tmp_path)}) == Keys(tmp_path / "keys" / "signing.key", tmp_path / "keys" / "signing.pub")
    assert Keys.from_env({"MODELCD_HOME": str(tmp_path), "MODELCD_SIGNING_KEY": "/k/a", "MODELCD_VERIFY_KEY": "/k/b"}) == Keys(
        tmp_path.__class__("/k/a"), tmp_path.__class__("/k/b")
    )
    missing = Keys(tmp_path / "none.key", tmp_path / "none.pub")
    with pytest.raises(MissingKey, match="modelcd keys init"):
        missing.require_private()
    with pytest.raises(MissingKey, match="MODELCD_VERIFY_KEY"):
        missing.require_public()


def test_a_signed_folder_refuses_a_changed_an_added_a_removed_file_and_another_key(tmp_path, keys, other):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / ".gitignore").write_text("*")  # dotfiles are signed too
    sig = sign_folder(folder, keys.private, tmp_path / "model.sig")
    verify_folder(folder, keys.public, sig, "m/1")
    with pytest.raises(BadSignature, match="another key"):
        verify_folder(folder, other.public, sig, "m/1")
    (folder / ".gitignore").write_text("!")
    with pytest.raises(BadSignature, match=r"'\.gitignore' \(contents changed\)"):
        verify_folder(folder, keys.public, sig, "m/1")
    (folder / ".gitignore").write_text("*")
    (folder / "extra.bin").write_bytes(b"x")
    with pytest.raises(BadSignature, match="extra.bin"):
        verify_folder(folder, keys.public, sig, "m/1")
    (folder / "extra.bin").unlink()
    (folder / "config.json").unlink()
    with pytest.raises(BadSignature, match="config.json"):
        verify_folder(folder, keys.public, sig, "m/1")
    with pytest.raises(BadSignature, match="has no signature"):
        verify_folder(folder, keys.public, tmp_path / "absent.sig", "m/1")
