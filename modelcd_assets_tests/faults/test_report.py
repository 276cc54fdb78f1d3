"""The report's verdict: a class ends in its expected outcome or the run fails; the false-block bound is Clopper–Pearson."""

import json

import pytest

from modelcd_assets.faults.outcomes import (
    BAD_INPUT,
    BLOCKED,
    NOT_REPRODUCIBLE,
    PROMOTED,
    REFUSED,
    ROLLOUT_ABORTED,
    ROLLOUT_PAUSED,
    ROLLOUT_STOPPED,
    Outcome,
    blocked,
    blocked_by,
)
from modelcd_assets.faults.report import ClassResult, ControlResult, SelftestReport, clopper_pearson

LONG_ANSWERS = Outcome(ROLLOUT_STOPPED, detail="eos_kept low", reasons=("length_ratio high",))


@pytest.mark.parametrize(
    "actual, expected, ok",
    [
        (blocked_by(["adapter_changes_outputs", "weights_are_finite"], "weights_are_finite"), blocked("weights_are_finite"), True),
        (blocked_by(["accuracy_within_tolerance"]), blocked("weights_are_finite"), False),
        (Outcome(PROMOTED), blocked("weights_are_finite"), False),
        (Outcome(REFUSED, detail="x"), Outcome(REFUSED), True),
        (Outcome(BAD_INPUT), Outcome(REFUSED), False),
        (Outcome(BAD_INPUT, detail="adapter x does not fit base y: ..."), Outcome(BAD_INPUT, detail="does not fit base"), True),
        (Outcome(BAD_INPUT, detail="FileNotFoundError: no split"), Outcome(BAD_INPUT, detail="does not fit base"), False),
        # Stopped on live traffic: aborted or paused, for the stated reason; never promoted, and never an offline block.
        (Outcome(ROLLOUT_ABORTED, detail="at step 1: eos_share low"), Outcome(ROLLOUT_STOPPED, detail="eos_share low"), True),
        (Outcome(ROLLOUT_PAUSED, detail="at step 1: eos_share low"), Outcome(ROLLOUT_STOPPED, detail="eos_share low"), True),
        (Outcome(ROLLOUT_PAUSED, detail="at step 1: fewer than 20"), Outcome(ROLLOUT_STOPPED, detail="eos_share low"), False),
        (Outcome(PROMOTED, detail="eos_share low"), Outcome(ROLLOUT_STOPPED, detail="eos_share low"), False),
        (Outcome(ROLLOUT_PAUSED, detail="error_rate high"), Outcome(ROLLOUT_ABORTED, detail="error_rate high"), False),
        # Stopped for any of the reasons it may be stopped for, and for no other.
        (Outcome(ROLLOUT_ABORTED, detail="at step 1: length_ratio high"), LONG_ANSWERS, True),
        (Outcome(ROLLOUT_PAUSED, detail="at step 1: eos_kept low"), LONG_ANSWERS, True),
        (Outcome(ROLLOUT_PAUSED, detail="at step 1: error_rate nodata; fewer than 10"), LONG_ANSWERS, False),
    ],
)
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
    return SelftestReport(
        "m",
        "models:/m/1",
        after,
        classes=[ClassResult("weight_scale_blowup", "weights", "", blocked("weights_are_finite"), actual, 1.0)],
        controls=[ControlResult("identical-1", "byte-identical", True, control, 1.0)],
    )


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


def _render_docs_faults():
    """bench/render_docs.py's faults table, as `make docs` renders it into docs/reliability.md."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "render_docs.py"
    spec = importlib.util.spec_from_file_location("render_docs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.faults


def test_a_fault_not_reproducible_on_the_model_is_counted_apart_neither_caught_nor_missed(tmp_path):
    measured = (
        "static INT8 calibrated on 4 one-word texts, on production's build: INT8 agrees with FP32 on 100.00% of the evaluation split (>="
        " 99.00%)"
    )
    caught = ClassResult("nan_weights", "weights", "", blocked("weights_are_finite"), blocked_by(["weights_are_finite"]), 1.0)
    apart = ClassResult(
        "static_calibration_collapse", "infra", "", blocked("int8_agrees_with_fp32"), Outcome(NOT_REPRODUCIBLE, detail=measured), 1.0
    )
    report = SelftestReport(
        "m",
        "models:/m/1",
        "models:/m/1",
        classes=[caught, apart],
        controls=[ControlResult("identical-1", "byte-identical", False, Outcome(PROMOTED), 1.0)],
    )

    assert not apart.ok and apart.not_reproducible and apart.verdict == "not reproducible"
    assert report.caught == 1 and [r.name for r in report.reproduced] == ["nan_weights"]
    assert report.interception_rate == 1.0 and report.exit_code == 0
    text = report.render()
    assert "fault classes: 1/1 ended in their expected outcome (interception rate 100%)" in text
    assert "not reproducible on this model, counted apart (neither caught nor missed): 1 (static_calibration_collapse)" in text
    assert f"  static_calibration_collapse: {measured}" in text and "not in their expected outcome" not in text and text.endswith("PASS")
    assert (
        "| static_calibration_collapse | blocked by gate int8_agrees_with_fp32 | not reproducible on this model | not reproducible |"
        in report.markdown()[0]
    )

    report.write_json(tmp_path / "faults.json")
    saved = json.loads((tmp_path / "faults.json").read_text())
    assert (
        saved["ok"] is True
        and saved["caught"] == 1
        and saved["reproduced"] == 1
        and saved["not_reproducible"] == ["static_calibration_collapse"]
    )
    assert [c["not_reproducible"] for c in saved["classes"]] == [False, True] and saved["classes"][1]["detail"] == measured
    saved["load"] = {"requests": 0, "errors": 0}
    docs = _render_docs_faults()(saved)
    assert docs.startswith(
        "**1 of 1 classes ended in their expected outcome, 1 not reproducible on this model; 0 of 1 clean controls were blocked**"
    )
    assert (
        "| static_calibration_collapse | infra | blocked by gate int8_agrees_with_fp32 | not reproducible on this model | not"
        " reproducible |" in docs
    )
    assert f"Not reproducible on this model, counted apart: static_calibration_collapse: {measured}." in docs

    # Not reproducible is never a way to pass: a missed class still fails the run, and so does a false block.
    missed = ClassResult("weight_scale_blowup", "weights", "", blocked("weights_within_scale"), Outcome(PROMOTED), 1.0)
    assert SelftestReport("m", "models:/m/1", "models:/m/1", classes=[apart, missed]).exit_code == 1
    assert (
        SelftestReport(
            "m",
            "models:/m/1",
            "models:/m/1",
            classes=[apart],
            controls=[ControlResult("identical-1", "byte-identical", False, blocked_by(["throughput_within_tolerance"]), 1.0)],
        ).exit_code
        == 1
    )
