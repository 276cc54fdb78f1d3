"""Each gate fails on a bad measurement and passes on a good one."""

import numpy as np

from modelcd_assets.lib.promotion import NO_CASES, GateRecord
from modelcd_assets.lib.gates import FAIL, INCONCLUSIVE, PASS, judge_accuracy, judge_drift, judge_fidelity, judge_golden, judge_throughput
from modelcd_assets.lib.policy import AccuracyPolicy, DriftPolicy, FidelityPolicy, ThroughputPolicy


def _correct(n, acc, seed=0):
    return np.random.default_rng(seed).random(n) < acc


def test_accuracy_first_candidate_uses_the_floor_only():
    assert judge_accuracy(_correct(2000, 0.9), None, AccuracyPolicy()).status == PASS
    low = judge_accuracy(_correct(2000, 0.6), None, AccuracyPolicy())
    assert low.status == FAIL and "floor" in low.reason


def test_accuracy_identical_passes_and_a_drop_fails():
    prod = _correct(2400, 0.9)
    assert judge_accuracy(prod, prod, AccuracyPolicy()).status == PASS
    cand = prod.copy()
    cand[np.flatnonzero(prod)[:24]] = False  # -1 point
    v = judge_accuracy(cand, prod, AccuracyPolicy())
    assert v.status == FAIL
    assert "tolerance" in v.reason and "significantly worse" in v.reason
    assert v.numbers["ci_high_points"] < 0


def test_accuracy_small_loss_within_tolerance_passes():
    prod = _correct(2400, 0.9)
    cand = prod.copy()
    cand[np.flatnonzero(prod)[:3]] = False  # -0.125 points
    assert judge_accuracy(cand, prod, AccuracyPolicy()).status == PASS


def test_fidelity():
    fp32 = np.arange(1000) % 4
    int8 = fp32.copy()
    assert judge_fidelity(int8, fp32, FidelityPolicy()).status == PASS
    int8[:20] = (int8[:20] + 1) % 4  # 98% agreement
    assert judge_fidelity(int8, fp32, FidelityPolicy()).status == FAIL


def test_drift_prediction_and_input():
    policy = DriftPolicy()
    calm = {"n_chars": 0.01, "n_words": 0.02, "n_tokens": 0.01, "digit_share": 0.0, "mean_word_length": 0.03}
    assert judge_drift(0.0, calm, policy).status == PASS
    assert judge_drift(None, calm, policy).status == PASS
    assert judge_drift(0.3, calm, policy).status == FAIL
    shifted = {k: 0.5 for k in calm}
    v = judge_drift(0.0, shifted, policy)
    assert v.status == FAIL and "traffic has drifted" in v.reason


def test_throughput_pass_fail_inconclusive_and_slo():
    p = ThroughputPolicy()
    assert judge_throughput(1.0, 0.97, 1.03, 10, True, p).status == PASS
    assert judge_throughput(0.6, 0.55, 0.65, 10, True, p).status == FAIL
    assert judge_throughput(0.88, 0.80, 0.95, 10, True, p).status == INCONCLUSIVE
    assert judge_throughput(1.0, 0.97, 1.03, 500, True, p).status == FAIL
    assert judge_throughput(0.5, 0.4, 0.6, 10, False, p).status == PASS  # no production: SLO only
    lenient = ThroughputPolicy(on_inconclusive="pass")
    assert judge_throughput(0.88, 0.80, 0.95, 10, True, lenient).status == PASS


def test_golden():
    assert judge_golden(["billing"], ["billing"], ["x"]).status == PASS
    v = judge_golden(["billing", "shipping"], ["billing", "account"], ["a", "b"])
    assert v.status == FAIL and "expected account, got shipping" in v.reason


def test_no_golden_cases_is_not_reported_as_passed():
    v = judge_golden([], [], [])
    assert v.status == NO_CASES and v.status != PASS and v.reason == "no golden cases declared"
    assert v.passed  # nothing to judge does not block: the policy declared no cases
    shown = GateRecord("golden_cases_pass", "SUCCEEDED", True, True, verdict=v.status).shown
    assert shown == "no golden cases declared"
