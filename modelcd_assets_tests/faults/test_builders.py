"""Every fault builder makes its candidate from production's files without touching them; only the file faults fail the scan."""

import pytest

from modelcd_assets.faults.builders import Production
from modelcd_assets.faults.catalog import BY_NAME, CLASSES, LM_CLASSES, select
from modelcd_assets.faults.outcomes import REFUSED, blocked
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.hashing import folder_manifest
from modelcd_assets.lib.judging.safety import scan_artifact
from modelcd_assets.lib.model.artifact import ADAPTER, inspect_artifact

BUILT = [fc for fc in CLASSES if fc.build is not None]


@pytest.fixture(scope="module")
def production(tiny_trained, tiny_adapters, tmp_path_factory):
    return Production(tiny_adapters["good"], ADAPTER, tmp_path_factory.mktemp("faults-work"), tiny_trained, "models:/tiny-base/1")


def test_the_catalog_covers_every_outcome_and_at_least_25_classes():
    assert len(CLASSES) >= 25
    assert len({fc.name for fc in CLASSES}) == len(CLASSES)
    assert {fc.expected.kind for fc in CLASSES} == {"refused at register", "manifest mismatch", "blocked by gate", "bad input", "superseded",
                                                     "run failed, nothing promoted", "sensor skipped, nothing launched", "never served",
                                                     "rejected before inference"}
    # A block is judged by the gate named, never by whichever gate a particular production happens to trip.
    assert BY_NAME["static_calibration_collapse"].expected == blocked("int8_agrees_with_fp32") and BY_NAME["static_calibration_collapse"].reproducible


def test_select_keeps_catalog_order_and_names_unknown_classes():
    assert [fc.name for fc in select(["remote_code", "nan_weights"])] == ["nan_weights", "remote_code"]
    with pytest.raises(ModelcdError, match="unknown fault class.*no_such_fault.*known: nan_weights"):
        select(["no_such_fault"])


@pytest.mark.parametrize("fc", BUILT, ids=[fc.name for fc in BUILT])
def test_each_builder_leaves_production_alone_and_only_file_faults_fail_the_scan(fc, production, tmp_path):
    before = folder_manifest(production.artifact)
    cand = fc.build(production, tmp_path / fc.name)
    assert folder_manifest(production.artifact) == before
    findings = scan_artifact(cand.folder)
    if fc.expected.kind == REFUSED or fc.expected.gate == "artifact_is_safe":
        assert findings, "a file fault the safety scan does not see"
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


def test_the_causal_lm_catalog_is_its_own_and_selected_by_task():
    assert {fc.task for fc in LM_CLASSES} == {"causal-lm"} and {fc.task for fc in CLASSES} == {"classification"}
    assert [fc.name for fc in select(None, "causal-lm")] == [fc.name for fc in LM_CLASSES] and len(LM_CLASSES) >= 10
    with pytest.raises(ModelcdError, match="nan_weights.*for a causal-lm production"):
        select(["nan_weights"], "causal-lm")


@pytest.mark.parametrize("fc", LM_BUILT, ids=[fc.name for fc in LM_BUILT])
def test_each_causal_lm_builder_leaves_production_alone_and_passes_the_scan(fc, lm_production, tmp_path):
    before = folder_manifest(lm_production.artifact)
    cand = fc.build(lm_production, tmp_path / fc.name)
    assert folder_manifest(lm_production.artifact) == before
    assert scan_artifact(cand.folder) == []  # every causal-LM fault must reach the gate it is meant for
    assert inspect_artifact(cand.folder).kind == ADAPTER
