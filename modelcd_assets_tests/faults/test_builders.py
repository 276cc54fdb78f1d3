"""Every fault builder makes its candidate from production's files without touching them; only the file faults fail the scan
or the adapter's file list (lib/tasks/adapter_files.py), and the base's own files copied beside an adapter pass both."""

import pytest

from modelcd_assets.faults.builders import Production, base_files_copied
from modelcd_assets.faults.catalog import FaultClass, FaultSuite, select, suite_of
from modelcd_assets.faults.classifier_faults import CLASSES
from modelcd_assets.faults.lm_faults import CLASSES as LM_CLASSES
from modelcd_assets.faults.outcomes import REFUSED, blocked
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.hashing import folder_manifest
from modelcd_assets.lib.judging.safety import scan_artifact
from modelcd_assets.lib.release.artifact import ADAPTER, inspect_artifact
from modelcd_assets.lib.tasks.adapter_files import adapter_file_findings
from modelcd_assets.lib.tasks.names import CAUSAL_LM, CLASSIFICATION

BUILT = [fc for fc in CLASSES if fc.build is not None]
BY_NAME = {fc.name: fc for fc in (*CLASSES, *LM_CLASSES)}


@pytest.fixture(scope="module")
def production(tiny_trained, tiny_adapters, tmp_path_factory):
    return Production(tiny_adapters["good"], ADAPTER, tmp_path_factory.mktemp("faults-work"), tiny_trained, "models:/tiny-base/1")


def test_the_catalog_covers_every_outcome_and_at_least_25_classes():
    assert len(CLASSES) >= 25
    assert len({fc.name for fc in CLASSES}) == len(CLASSES)
    assert {fc.expected.kind for fc in CLASSES} == {
        "refused at register",
        "manifest mismatch",
        "blocked by gate",
        "bad input",
        "superseded",
        "run failed, nothing promoted",
        "sensor skipped, nothing launched",
        "never served",
        "rejected before inference",
        "aborted on live traffic",
        "paused on live traffic",
        "stopped on live traffic",
    }
    # A block is judged by the gate named, never by whichever gate a particular production happens to trip.
    assert (
        BY_NAME["static_calibration_collapse"].expected == blocked("int8_agrees_with_fp32")
        and BY_NAME["static_calibration_collapse"].reproducible
    )


def test_select_keeps_catalog_order_and_names_unknown_classes():
    assert [fc.name for fc in select(["remote_code", "nan_weights"], "classification")] == ["nan_weights", "remote_code"]
    with pytest.raises(ModelcdError, match="unknown fault class.*no_such_fault.*known: nan_weights"):
        select(["no_such_fault"], "classification")


@pytest.mark.parametrize("fc", BUILT, ids=[fc.name for fc in BUILT])
def test_each_builder_leaves_production_alone_and_only_file_faults_fail_the_scan(fc, production, tmp_path):
    before = folder_manifest(production.artifact)
    cand = fc.build(production, tmp_path / fc.name)
    assert folder_manifest(production.artifact) == before
    findings = scan_artifact(cand.folder)
    if not findings and inspect_artifact(cand.folder).kind == ADAPTER:
        findings = adapter_file_findings(cand.folder, CLASSIFICATION, production.base)
    if fc.expected.kind == REFUSED or fc.expected.gate == "artifact_is_safe":
        assert findings, "a file fault neither the safety scan nor the adapter's file list sees"
        assert fc.expected.kind != REFUSED or fc.expected.detail in f"refusing: {'; '.join(map(str, findings))}"
        assert cand.raw == (fc.expected.gate == "artifact_is_safe")
    else:
        assert findings == [], findings  # it must get past the scan to reach the gate it is meant for
        inspect_artifact(cand.folder)
    if cand.marker is not None:
        assert not cand.marker.exists()


LM_BUILT = [fc for fc in LM_CLASSES if fc.build is not None]


@pytest.fixture(scope="module")
def lm_production(tiny_lm, tmp_path_factory):
    return Production(tiny_lm.adapter, ADAPTER, tmp_path_factory.mktemp("lm-faults-work"), tiny_lm.base, "models:/tiny-lm-base/1")


def test_each_task_declares_its_own_fault_suite_and_classes_are_selected_by_task():
    assert suite_of(CAUSAL_LM).classes == LM_CLASSES and suite_of(CLASSIFICATION).classes == CLASSES
    assert [fc.name for fc in select(None, CAUSAL_LM)] == [fc.name for fc in LM_CLASSES] and len(LM_CLASSES) >= 10
    with pytest.raises(ModelcdError, match="nan_weights.*for a causal-lm production"):
        select(["nan_weights"], CAUSAL_LM)
    with pytest.raises(ModelcdError, match="unknown task 'urgency-score'"):
        select(None, "urgency-score")


def test_a_task_without_a_fault_suite_is_refused_by_the_sandbox_naming_it(monkeypatch):
    """A task declared as the classifier is, less its fault suite (and its demo); declared for this test only."""
    from dataclasses import replace

    from modelcd_assets.lib.tasks import names

    names.known_tasks()
    monkeypatch.setattr(names, "_DECLARED", dict(names._DECLARED))
    classifier = names.declaration_of(CLASSIFICATION)
    names.declare_task(replace(classifier, name="no-faults", faults=None, demo=None, demo_model="", architectures=(), peft_task_types=()))
    with pytest.raises(
        ModelcdError, match=r"no-faults models declare no fault classes \(TaskDeclaration.faults\).*for classification, causal-lm models"
    ):
        select(None, "no-faults")


def test_a_fault_suite_names_each_class_once_and_says_why_it_has_no_load():
    fc = FaultClass("x", "weights", blocked("weights_are_finite"))
    with pytest.raises(ModelcdError, match=r"names a class twice: \['x'\]"):
        FaultSuite((fc, fc), lambda *a: [], no_load="no server")
    with pytest.raises(ModelcdError, match="says why its controls are gated without load"):
        FaultSuite((fc,), lambda *a: [])


@pytest.mark.parametrize("fc", LM_BUILT, ids=[fc.name for fc in LM_BUILT])
def test_each_causal_lm_builder_leaves_production_alone_and_passes_the_scan(fc, lm_production, tmp_path):
    before = folder_manifest(lm_production.artifact)
    cand = fc.build(lm_production, tmp_path / fc.name)
    assert folder_manifest(lm_production.artifact) == before
    assert scan_artifact(cand.folder) == []  # every causal-LM fault must reach the gate it is meant for, or its file list
    assert inspect_artifact(cand.folder).kind == ADAPTER
    refused = [str(f) for f in adapter_file_findings(cand.folder, CAUSAL_LM, lm_production.base)]
    if fc.expected.kind == REFUSED:
        assert len(refused) == 1 and fc.expected.detail in f"refusing: {refused[0]}", refused
    else:
        assert refused == []


@pytest.mark.parametrize("task", [CLASSIFICATION, CAUSAL_LM])
def test_the_bases_own_files_copied_beside_the_adapter_pass_the_file_list(task, request, tmp_path):
    prod = request.getfixturevalue("production" if task == CLASSIFICATION else "lm_production")
    cand = base_files_copied(prod, tmp_path / "base-files", task)
    copied = sorted(set(folder_manifest(cand.folder)) - set(folder_manifest(prod.artifact)))
    assert {"config.json", "tokenizer.json", "tokenizer_config.json"} <= set(copied), copied
    assert all(folder_manifest(cand.folder)[n] == folder_manifest(prod.base)[n] for n in copied)
    assert scan_artifact(cand.folder) == [] and adapter_file_findings(cand.folder, task, prod.base) == []


def test_the_shifted_traffic_fault_names_the_split_it_needs(tmp_path):
    from types import SimpleNamespace

    from modelcd_assets.faults.classifier_faults import disagrees_on_shifted_live_texts

    with pytest.raises(ModelcdError, match=r"traffic_shifted\.jsonl is missing: this class teaches and asks .*add it to the data folder"):
        disagrees_on_shifted_live_texts(SimpleNamespace(data=tmp_path))


def test_the_shifted_traffic_fault_refuses_labels_production_does_not_hold(production, tmp_path):
    from types import SimpleNamespace

    from modelcd_assets.faults.classifier_faults import disagrees_on_shifted_live_texts

    (tmp_path / "traffic_shifted.jsonl").write_text('{"text": "where is my parcel", "label": "weather"}\n' * 4)
    with pytest.raises(ModelcdError, match=r"labels tickets \['weather'\], which production's labels \[.*billing.*\] do not hold"):
        disagrees_on_shifted_live_texts(SimpleNamespace(data=tmp_path, prod=production))
