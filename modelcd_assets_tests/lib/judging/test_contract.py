"""Contract extraction and the SemVer bump each kind of change requires."""

import copy

import pytest

from modelcd_assets.lib.classifier.contract import extract_contract
from modelcd_assets.lib.classifier.export import export_onnx
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.contract import bump, level_between, parse_semver, required_level
from modelcd_assets.lib.judging.gates import judge_semver
from modelcd_assets.lib.tasks.semver import contract_changes


@pytest.fixture(scope="module")
def contract(tiny_trained, tmp_path_factory):
    return extract_contract(export_onnx(tiny_trained, tmp_path_factory.mktemp("c") / "m.onnx"), tiny_trained, "classification")


def test_extracted_contract(contract):
    assert [i["name"] for i in contract["inputs"]] == ["input_ids", "attention_mask", "token_type_ids"]
    assert contract["inputs"][0]["dtype"] == "INT64" and contract["inputs"][0]["shape"] == ["batch", "sequence"]
    assert contract["outputs"][0]["name"] == "logits"
    assert contract["id2label"] == ["billing", "technical", "shipping", "account"]
    assert contract["vocab_size"] == 30522 and contract["opset"] == 17 and contract["max_length"] == 128


def _edit(contract, fn):
    new = copy.deepcopy(contract)
    fn(new)
    return new


@pytest.mark.parametrize(
    "edit, ids_changed, level",
    [
        (lambda c: None, False, "patch"),
        (lambda c: c["inputs"].pop(), False, "major"),
        (lambda c: c["outputs"][0].update(dtype="FLOAT16"), False, "major"),
        (lambda c: c["id2label"].reverse(), False, "major"),
        (lambda c: c["id2label"].append("refund"), False, "minor"),
        (lambda c: c["inputs"].append({"name": "extra", "dtype": "INT64", "shape": ["batch"], "optional": True}), False, "minor"),
        (lambda c: c["inputs"].append({"name": "extra", "dtype": "INT64", "shape": ["batch"], "optional": False}), False, "major"),
        (lambda c: c.update(max_length=512), False, "minor"),
        (lambda c: c.update(tokenizer_sha256="other"), True, "major"),
        (lambda c: c.update(tokenizer_sha256="other"), False, "patch"),
    ],
)
def test_required_bump(contract, edit, ids_changed, level):
    assert required_level(contract_changes(contract, _edit(contract, edit), ids_changed)) == level


def test_semver_arithmetic():
    assert bump("1.4.2", "major") == "2.0.0" and bump("1.4.2", "minor") == "1.5.0" and bump("1.4.2", "patch") == "1.4.3"
    assert (
        level_between("1.4.2", "2.0.0") == "major"
        and level_between("1.4.2", "1.4.3") == "patch"
        and level_between("1.4.2", "1.4.2") is None
    )
    with pytest.raises(ModelcdError, match="not a semantic version"):
        parse_semver("v2")


def test_semver_gate_fails_when_the_declared_bump_is_too_small(contract):
    changes = [{"level": "major", "what": "labels changed order or names"}]
    base = {"production_semver": "1.0.0", "changes": changes, "required_level": "major"}
    assert judge_semver(base | {"declared_level": "patch", "declared": "patch bump", "semver": "1.0.1"}).status == "fail"
    assert judge_semver(base | {"declared_level": "major", "declared": "2.0.0", "semver": "2.0.0"}).status == "pass"
    assert judge_semver(base | {"declared_level": None, "declared": "0.9.0", "semver": "0.9.0"}).status == "fail"
    assert (
        judge_semver(
            {
                "production_semver": None,
                "changes": [],
                "required_level": "patch",
                "declared_level": None,
                "declared": "1.0.0",
                "semver": "1.0.0",
            }
        ).status
        == "pass"
    )


def test_regating_production_keeps_its_semver(contract):
    import json

    from modelcd_assets.lib.release.registry import CONTRACT, SEMVER
    from modelcd_assets.lib.tasks.semver import semver_report

    tags = {SEMVER: "2.1.0", CONTRACT: json.dumps(contract)}
    report = semver_report(contract, tags, tags, False, regating_production=True)
    assert report["semver"] == "2.1.0" and judge_semver(report).status == "pass"
    bumped = semver_report(contract, {}, tags, False)
    assert bumped["semver"] == "2.1.1" and bumped["declared_level"] == "patch"
