"""The report's verdict: a class ends in its expected outcome or the run fails; the false-block bound is Clopper–Pearson."""

import json

import pytest

from modelcd_assets.faults.outcomes import BAD_INPUT, BLOCKED, PROMOTED, REFUSED, Outcome, blocked, blocked_by
from modelcd_assets.faults.report import ClassResult, ControlResult, SelftestReport, clopper_pearson


@pytest.mark.parametrize("actual, expected, ok", [
    (blocked_by(["adapter_changes_outputs", "weights_are_finite"], "weights_are_finite"), blocked("weights_are_finite"), True),
    (blocked_by(["accuracy_within_tolerance"]), blocked("weights_are_finite"), False),
    (Outcome(PROMOTED), blocked("weights_are_finite"), False),
    (Outcome(REFUSED, detail="x"), Outcome(REFUSED), True),
    (Outcome(BAD_INPUT), Outcome(REFUSED), False),
    (Outcome(BAD_INPUT, detail="adapter x does not fit base y: ..."), Outcome(BAD_INPUT, detail="does not fit base"), True),
    (Outcome(BAD_INPUT, detail="FileNotFoundError: no split"), Outcome(BAD_INPUT, detail="does not fit base"), False),
])
def test_an_outcome_satisfies_only_its_kind_and_for_a_block_its_gate(actual, expected, ok):
    assert actual.satisfies(expected) is ok


def test_blocked_names_the_expected_gate_first():
    got = blocked_by(["adapter_changes_outputs", "weights_are_finite"], "weights_are_finite")
    assert got.kind == BLOCKED and str(got) == "blocked by gate weights_are_finite (+1: adapter_changes_outputs)"


@pytest.mark.parametrize("k, n, low, high", [(0, 10, 0.0, 0.3085), (1, 10, 0.0025, 0.4450), (0, 20, 0.0, 0.1684), (0, 0, 0.0, 1.0)])
def test_clopper_pearson(k, n, low, high):
    lo, hi = clopper_pearson(k, n)
    assert lo == pytest.approx(low, abs=1e-4) and hi == pytest.approx(high, abs=1e-4)


def _report(actual: Outcome, control: Outcome, after: str = "models:/m/1") -> SelftestReport:
    return SelftestReport("m", "models:/m/1", after,
                          classes=[ClassResult("weight_scale_blowup", "weights", "", blocked("weights_are_finite"), actual, 1.0)],
                          controls=[ControlResult("identical-1", "byte-identical", True, control, 1.0)])


def test_exit_code_is_zero_only_when_every_class_is_caught_no_control_blocked_and_production_unmoved(tmp_path):
    good = _report(blocked_by(["weights_are_finite"]), Outcome(PROMOTED))
    assert good.exit_code == 0 and good.render().endswith("PASS")
    missed = _report(Outcome(PROMOTED, detail="models:/m/7 is production"), Outcome(PROMOTED))
    assert missed.exit_code == 1
    text = missed.render()
    assert "weight_scale_blowup: expected blocked by gate weights_are_finite, got promoted: models:/m/7 is production" in text
    assert "interception rate 0%" in text and text.endswith("FAIL")
    false_block = _report(blocked_by(["weights_are_finite"]), blocked_by(["throughput_within_tolerance"]))
    assert false_block.exit_code == 1 and "false-block rate 100.0%" in false_block.render()
    assert _report(blocked_by(["weights_are_finite"]), Outcome(PROMOTED), after="models:/m/2").exit_code == 1
    missed.write_json(tmp_path / "r.json")
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["ok"] is False and saved["classes"][0]["actual"] == "promoted" and saved["false_block_upper_95"] == pytest.approx(0.975)


def test_an_expected_block_may_name_the_gates_that_can_see_it_first():
    from modelcd_assets.faults.outcomes import blocked, blocked_by

    expected = blocked("accuracy_within_tolerance", "int8_agrees_with_fp32")
    assert str(expected) == "blocked by gate accuracy_within_tolerance or int8_agrees_with_fp32"
    assert blocked_by(["int8_agrees_with_fp32"]).satisfies(expected)
    assert blocked_by(["accuracy_within_tolerance", "no_drift_detected"]).satisfies(expected)
    assert not blocked_by(["no_drift_detected"]).satisfies(expected)
    assert not blocked_by(["int8_agrees_with_fp32"]).satisfies(blocked("accuracy_within_tolerance"))
