"""Each gate fails on a bad measurement and passes on a good one."""

import numpy as np
import pytest

from modelcd_assets.lib.judging.gates import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    Verdict,
    judge_accuracy,
    judge_adapter_changes_outputs,
    judge_adapter_fits_base,
    judge_cost,
    judge_drift,
    judge_fidelity,
    judge_golden,
    judge_gradients,
    judge_loads_cleanly,
    judge_paired_speed,
    judge_probe,
    judge_safety,
    judge_semver,
    judge_throughput,
    judge_tokenizer,
    judge_weights_finite,
)
from modelcd_assets.lib.judging.policy import AccuracyPolicy, CostPolicy, DriftPolicy, FidelityPolicy, ThroughputPolicy
from modelcd_assets.lib.judging.promotion import NO_CASES, GateRecord


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


def test_the_ratio_per_cpu_second_is_judged_and_the_wall_clock_s_is_shown_beside_it():
    p = ThroughputPolicy()
    # Beside a busy core the wall ratio straddles min_ratio while the CPU time per item tells the graphs apart.
    v = judge_throughput(0.99, 0.96, 1.02, 10, True, p, wall=(0.86, 0.72, 1.15))
    assert v.status == PASS and "per CPU second" in v.reason and "wall 0.86x [0.72, 1.15]" in v.measured, (v.measured, v.reason)
    assert v.numbers["wall_ratio_ci_low"] == 0.72
    # A graph that does more work per item fails on its CPU time, whatever the wall clock said.
    v = judge_throughput(0.6, 0.55, 0.65, 10, True, p, wall=(0.95, 0.9, 1.0))
    assert v.status == FAIL and "per CPU second is 0.60x" in v.reason
    assert judge_throughput(0.88, 0.80, 0.95, 10, True, p, wall=(1.0, 0.99, 1.01)).status == INCONCLUSIVE


def test_paired_speed_reads_the_wall_ratio_only_of_a_summary_judged_per_cpu_second():
    row = {
        "ratio_median": 0.99,
        "ratio_ci_low": 0.96,
        "ratio_ci_high": 1.02,
        "candidate_p99_ms": 5.0,
        "wall_ratio_median": 0.5,
        "wall_ratio_ci_low": 0.4,
        "wall_ratio_ci_high": 0.6,
    }
    v = judge_paired_speed({"1": row | {"ratio_basis": "cpu"}}, True, ThroughputPolicy())
    assert v.status == PASS and "wall 0.50x" in v.measured and v.numbers["b1_wall_ratio_median"] == 0.5
    # A summary recorded before the CPU clock was read: its ratio_* are the wall clock's, judged as such, no wall shown twice.
    v = judge_paired_speed({"1": {k: x for k, x in row.items() if not k.startswith("wall")}}, True, ThroughputPolicy())
    assert v.status == PASS and "wall" not in v.measured and "per CPU" not in v.reason


def test_a_paired_run_s_ratio_is_per_cpu_second_and_its_wall_ratio_is_kept():
    from modelcd_assets.lib.inference.benchmark import PairedRun, Trial, merge_runs, summarize

    # The candidate's wall time doubled by another process in every trial; its CPU time per item is production's.
    cand = [Trial(50.0, 100.0, [1.0]), Trial(40.0, 101.0, [2.0]), Trial(60.0, 99.0, [1.0])] * 2
    prod = [Trial(100.0, 100.0, [1.0])] * 6
    run = PairedRun.of(1, cand, prod)
    assert len(run.candidate_latency_ms) == 6 and run.ratios.tolist() == [1.0, 1.01, 0.99] * 2
    s = summarize(run, 0.95)
    assert s["ratio_basis"] == "cpu" and s["ratio_median"] == 1.0 and s["wall_ratio_median"] == 0.5
    assert s["candidate_items_per_s"] == 50.0  # what a user waits for stays the wall clock's: the SLO and the cost ceiling judge it
    merged = merge_runs(run, run)
    assert len(merged.ratios) == 12 and len(merged.wall_ratios) == 12


def test_production_s_own_graph_passes_throughput_by_hash_whatever_the_timing_and_still_answers_to_the_slo():
    p, sha = ThroughputPolicy(), "ab" * 32
    for timing in [(0.88, 0.80, 0.95), (0.6, 0.55, 0.65)]:  # inconclusive and failing timings: noise, on the same bytes
        v = judge_throughput(*timing, 10, True, p, same_graph_sha256=sha)
        assert v.status == PASS and "abababababab" in v.reason and "not judged" in v.reason and v.numbers["same_graph_sha256"] == sha
    assert judge_throughput(1.0, 1.0, 1.0, 500, True, p, same_graph_sha256=sha).status == FAIL  # the p99 SLO is still judged
    assert judge_throughput(0.6, 0.55, 0.65, 10, True, p, same_graph_sha256=None).status == FAIL


def test_production_s_own_graph_is_priced_at_production_s_speed():
    from modelcd_assets.lib.inference.benchmark import cost_inputs

    timed = {
        "candidate_items_per_s": 700.0,
        "production_items_per_s": 1000.0,
        "ratio_median": 0.7,
        "ratio_ci_low": 0.6,
        "ratio_ci_high": 0.75,
    }
    policy = CostPolicy(node_usd_per_hour=0.1, tolerance=0.1, max_usd_per_1k_requests=1.0)
    noisy = judge_cost(cost_inputs("requests", timed, True), policy)
    assert noisy.status == FAIL  # another graph at 0.6-0.75x: costs more than +10%
    same = cost_inputs("requests", timed | {"same_graph_sha256": "cd" * 32}, True)
    assert same["speed_ratio"] == [1.0, 1.0, 1.0] and same["same_graph_sha256"] == "cd" * 32
    v = judge_cost(same, policy)
    assert v.status == PASS and "production's own INT8 graph, sha256 cdcdcdcdcdcd" in v.measured
    assert "same_graph_sha256" not in cost_inputs(
        "requests", timed | {"same_graph_sha256": "cd" * 32}, False
    )  # no production: nothing to share


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


def test_verdict_passes_on_pass_and_no_cases_only_and_serializes_every_field():
    v = Verdict("g", PASS, "1", "2", "why", {"n": 1})
    assert v.passed and Verdict("g", NO_CASES, "", "", "").passed
    assert not Verdict("g", FAIL, "", "", "").passed and not Verdict("g", INCONCLUSIVE, "", "", "").passed
    assert v.to_dict() == {"gate": "g", "status": PASS, "measured": "1", "threshold": "2", "reason": "why", "numbers": {"n": 1}}


def test_safety_verdict_names_the_first_three_findings():
    assert judge_safety([]) == Verdict(
        "artifact_safety",
        PASS,
        "0 finding(s)",
        "0 findings",
        "no pickles, code, bad safetensors, escaping links or oversized files",
        {"findings": 0},
    )
    assert judge_safety(["a", "b", "c"]) == Verdict("artifact_safety", FAIL, "3 finding(s)", "0 findings", "a; b; c", {"findings": 3})
    assert judge_safety(["a", "b", "c", "d", "e"]).reason == "a; b; c (+2 more)"


def _finite(nonfinite=None, **extra):
    return {"nonfinite_tensors": nonfinite or {"model.safetensors": []}, **extra}


@pytest.mark.parametrize(
    "report, expected",
    [
        (_finite(), Verdict("weights_finite", PASS, "0 non-finite tensors", "0", "every weight tensor is finite", {"norm_outliers": 0})),
        (
            _finite(weight_norm_outliers=None),
            Verdict("weights_finite", PASS, "0 non-finite tensors", "0", "every weight tensor is finite", {"norm_outliers": 0}),
        ),
        (
            _finite(weight_norm_outliers={"a": 2.0, "b": 3.0, "c": 4.0, "d": 5.0}),
            Verdict(
                "weights_finite",
                PASS,
                "0 non-finite tensors",
                "0",
                "every weight tensor is finite; weight-norm outliers vs base (reported): a, b, c",
                {"norm_outliers": 4},
            ),
        ),
        (
            _finite({"model.safetensors": ["w1", "w2", "w3", "w4"], "adapter_model.safetensors": [], "onnx/x.safetensors": ["v"]}),
            Verdict(
                "weights_finite",
                FAIL,
                "5 non-finite tensors",
                "0",
                "NaN/Inf in model.safetensors: w1, w2, w3; NaN/Inf in onnx/x.safetensors: v",
                {"norm_outliers": 0},
            ),
        ),
    ],
)
def test_weights_finite_verdicts(report, expected):
    assert judge_weights_finite(report) == expected


CLEAN_LOADING = {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": []}


@pytest.mark.parametrize(
    "report, expected",
    [
        (
            {"merged_loading": CLEAN_LOADING},
            Verdict("loads_cleanly", PASS, "0 problem(s)", "0", "no missing, unexpected or mismatched keys"),
        ),
        (
            {"merged_loading": CLEAN_LOADING, "adapter": None},
            Verdict("loads_cleanly", PASS, "0 problem(s)", "0", "no missing, unexpected or mismatched keys"),
        ),
        (
            {"merged_loading": CLEAN_LOADING, "adapter": {"head_not_provided": []}},
            Verdict("loads_cleanly", PASS, "0 problem(s)", "0", "no missing, unexpected or mismatched keys"),
        ),
        (
            {
                "merged_loading": {"missing_keys": ["a", "b", "c", "d"], "unexpected_keys": [], "mismatched_keys": ["m"]},
                "adapter": {"head_not_provided": ["classifier.weight", "classifier.bias"]},
            },
            Verdict(
                "loads_cleanly",
                FAIL,
                "3 problem(s)",
                "0",
                "missing keys: a, b, c; mismatched keys: m; the base lacks classifier.weight, classifier.bias and the adapter "
                "does not provide it: the head would be randomly initialized",
            ),
        ),
    ],
)
def test_loads_cleanly_verdicts(report, expected):
    assert judge_loads_cleanly(report) == expected


FIT = {
    "shape_problems": [],
    "declared_base": "models:/tiny-base/1",
    "registered_base": "models:/tiny-base/1",
    "modules_matched": 12,
    "rank": 4,
}


@pytest.mark.parametrize(
    "fit, expected",
    [
        (None, Verdict("adapter_fits_base", PASS, "n/a", "n/a", "full model: no adapter to fit")),
        (
            FIT,
            Verdict(
                "adapter_fits_base",
                PASS,
                "12 modules, rank 4",
                ">= 1 module, shapes fit",
                "rank 4, 12 base modules matched",
                {"modules_matched": 12},
            ),
        ),
        (
            FIT | {"declared_base": None, "modules_matched": 1},
            Verdict(
                "adapter_fits_base",
                PASS,
                "1 modules, rank 4",
                ">= 1 module, shapes fit",
                "rank 4, 1 base modules matched",
                {"modules_matched": 1},
            ),
        ),
        (
            FIT | {"shape_problems": ["p1", "p2", "p3", "p4"], "declared_base": "models:/other/1", "modules_matched": 0},
            Verdict(
                "adapter_fits_base",
                FAIL,
                "0 modules, rank 4",
                ">= 1 module, shapes fit",
                "p1; p2; p3; adapter_config.json declares base 'models:/other/1' but it is registered against 'models:/tiny-base/1'; "
                "the adapter matches no module of the base; it would change nothing",
                {"modules_matched": 0},
            ),
        ),
    ],
)
def test_adapter_fits_base_verdicts(fit, expected):
    assert judge_adapter_fits_base({"adapter": fit}) == expected


@pytest.mark.parametrize(
    "change, expected",
    [
        (None, Verdict("adapter_changes_outputs", PASS, "n/a", "n/a", "full model: no base to compare")),
        (0.5, Verdict("adapter_changes_outputs", PASS, "0.5", "> 1e-05", "max |Δlogit| vs base 0.5", {"max_output_change": 0.5})),
        (
            1e-5,
            Verdict(
                "adapter_changes_outputs",
                FAIL,
                "1e-05",
                "> 1e-05",
                "merged outputs equal the base's on the probe batch (max |Δlogit| 1.0e-05)",
                {"max_output_change": 1e-5},
            ),
        ),
    ],
)
def test_adapter_changes_outputs_verdicts(change, expected):
    assert judge_adapter_changes_outputs({"adapter": None if change is None else {"max_output_change": change}}) == expected


@pytest.mark.parametrize(
    "tokenizer, expected",
    [
        (
            {"vocab_size": 30, "embedding_rows": 30, "change_declared": False},
            Verdict("tokenizer", PASS, "30 tokens / 30 rows", "vocab <= rows, same ids", "vocab 30 <= 30 rows; probe ids match"),
        ),
        (
            {"vocab_size": 30, "embedding_rows": 30, "change_declared": True, "probe_id_mismatches": ["héllo"]},
            Verdict(
                "tokenizer",
                PASS,
                "30 tokens / 30 rows",
                "vocab <= rows, same ids",
                "vocab 30 <= 30 rows; probe ids differ (declared change)",
            ),
        ),
        (
            {"vocab_size": 31, "embedding_rows": 30, "change_declared": False, "probe_id_mismatches": ["héllo", "x"]},
            Verdict(
                "tokenizer",
                FAIL,
                "31 tokens / 30 rows",
                "vocab <= rows, same ids",
                "tokenizer has 31 tokens but the embedding table only 30 rows; token ids differ from the reference tokenizer on 2 probe"
                " string(s), e.g. 'héllo'; register with --tokenizer-change if intended",
            ),
        ),
    ],
)
def test_tokenizer_verdicts(tokenizer, expected):
    assert judge_tokenizer({"tokenizer": tokenizer}) == expected


@pytest.mark.parametrize(
    "report, expected",
    [
        (
            {"probe_finite": True, "probe_deterministic": True},
            Verdict("probe", PASS, "finite, deterministic", "both", "finite and deterministic"),
        ),
        (
            {"probe_finite": False, "probe_deterministic": True},
            Verdict("probe", FAIL, "probe outputs contain NaN or Inf", "both", "probe outputs contain NaN or Inf"),
        ),
        (
            {"probe_finite": True, "probe_deterministic": False},
            Verdict("probe", FAIL, "the same input twice gave different outputs", "both", "the same input twice gave different outputs"),
        ),
        (
            {"forward_error": "RuntimeError: " + "x" * 300, "probe_finite": False, "probe_deterministic": False},
            Verdict("probe", FAIL, "error", "finite, deterministic", "the probe batch does not run: RuntimeError: " + "x" * 186),
        ),
    ],
)
def test_probe_verdicts(report, expected):
    assert judge_probe(report) == expected


@pytest.mark.parametrize(
    "gradients, expected",
    [
        ({"loss_finite": True, "nonfinite": []}, Verdict("gradients", PASS, "0 non-finite", "0", "finite loss and gradients")),
        (
            {"loss_finite": False, "nonfinite": ["a", "b", "c", "d"]},
            Verdict("gradients", FAIL, "4 non-finite", "0", "loss is NaN or Inf; non-finite gradients in a, b, c"),
        ),
        ({"loss_finite": True, "nonfinite": ["a"]}, Verdict("gradients", FAIL, "1 non-finite", "0", "non-finite gradients in a")),
        (
            {"loss_finite": False, "nonfinite": [], "error": "E" * 300},
            Verdict("gradients", FAIL, "error", "0", "no backward pass: " + "E" * 200),
        ),
    ],
)
def test_gradient_verdicts(gradients, expected):
    assert judge_gradients({"gradients": gradients}) == expected


SEMVER = {
    "production_semver": "1.0.0",
    "semver": "1.1.0",
    "declared": "1.1.0",
    "declared_level": "minor",
    "required_level": "minor",
    "changes": [{"level": "minor", "what": "new output"}],
}


@pytest.mark.parametrize(
    "report, expected",
    [
        (
            SEMVER | {"production_semver": None, "semver": "1.0.0", "changes": []},
            Verdict("semver", PASS, "1.0.0", "n/a (first version)", "first version 1.0.0; contract recorded"),
        ),
        (
            SEMVER,
            Verdict("semver", PASS, "declared minor", ">= minor", "1.0.0 -> 1.1.0 (minor) covers minor: MINOR: new output", {"changes": 1}),
        ),
        (
            SEMVER | {"semver": "2.0.0", "declared": "2.0.0", "declared_level": "major"},
            Verdict("semver", PASS, "declared major", ">= minor", "1.0.0 -> 2.0.0 (major) covers minor: MINOR: new output", {"changes": 1}),
        ),
        (
            SEMVER | {"semver": "1.0.1", "declared": "1.0.1", "declared_level": "patch", "required_level": "patch", "changes": []},
            Verdict(
                "semver",
                PASS,
                "declared patch",
                ">= patch",
                "1.0.0 -> 1.0.1 (patch) covers patch: no contract change (weights only)",
                {"changes": 0},
            ),
        ),
        (
            SEMVER | {"semver": "0.9.0", "declared": "0.9.0", "declared_level": None},
            Verdict("semver", FAIL, "declared None", ">= minor", "declared 0.9.0 is not greater than production's 1.0.0", {"changes": 1}),
        ),
        (
            SEMVER
            | {
                "required_level": "major",
                "changes": [{"level": "major", "what": "labels reordered"}, {"level": "minor", "what": "new output"}],
            },
            Verdict(
                "semver",
                FAIL,
                "declared minor",
                ">= major",
                "declared a minor bump (1.0.0 -> 1.1.0) but the contract change needs major: MAJOR: labels reordered; "
                "MINOR: new output; register with --bump major",
                {"changes": 2},
            ),
        ),
    ],
)
def test_semver_verdicts(report, expected):
    assert judge_semver(report) == expected


def test_first_candidate_verdicts_at_and_below_the_floor():
    floor = AccuracyPolicy(absolute_floor=0.75)
    at = judge_accuracy([1] * 75 + [0] * 25, None, floor)
    assert at == Verdict(
        "accuracy",
        PASS,
        "75.00%",
        ">= 75.00% (floor only)",
        "first candidate, no production model: judged against the absolute floor only; accuracy 75.00% >= floor 75.00%",
        {"candidate_accuracy": 0.75, "absolute_floor": 0.75, "examples": 100},
    )
    below = judge_accuracy([1] * 74 + [0] * 26, None, floor)
    assert (below.status, below.reason) == (
        FAIL,
        "first candidate, no production model: judged against the absolute floor only; accuracy 74.00% < floor 75.00%",
    )


def _paired(lost: int, n: int = 1024, right: int = 512):
    """Production right on `right` of n examples, the candidate on the same ones less `lost`: exact binary fractions."""
    prod = np.arange(n) < right
    cand = prod.copy()
    cand[:lost] = False
    return cand, prod


def test_paired_accuracy_verdict_carries_every_number():
    from modelcd_assets.lib.judging.stats import mcnemar_worse_pvalue, paired_bootstrap_ci

    cand, prod = _paired(4)
    policy = AccuracyPolicy(absolute_floor=0.4, tolerance_points=0.390625)
    lo, hi = paired_bootstrap_ci(cand, prod, policy.bootstrap_samples)
    assert lo < 0 and mcnemar_worse_pvalue(cand, prod) == 0.0625
    assert judge_accuracy(cand, prod, policy) == Verdict(
        "accuracy",
        PASS,
        f"49.61% (Δ -0.39 pt, 95% CI [{100 * lo:+.2f}, {100 * hi:+.2f}], p_worse=0.0625)",
        "Δ >= -0.390625 pt, p >= 0.05, >= 40%",
        "within 0.390625 points of production and not significantly worse (p=0.0625)",
        {
            "candidate_accuracy": 0.49609375,
            "absolute_floor": 0.4,
            "examples": 1024,
            "production_accuracy": 0.5,
            "diff_points": -0.390625,
            "ci_low_points": 100 * lo,
            "ci_high_points": 100 * hi,
            "p_worse": 0.0625,
            "tolerance_points": 0.390625,
            "alpha": 0.05,
        },
    )


def test_paired_accuracy_fails_past_the_tolerance_or_the_floor_or_at_significance():
    cand, prod = _paired(4)
    assert (
        judge_accuracy(cand, prod, AccuracyPolicy(absolute_floor=0.4, tolerance_points=0.390625, alpha=0.0625)).status == PASS
    )  # p == alpha is not below it
    v = judge_accuracy(cand, prod, AccuracyPolicy(absolute_floor=0.5, tolerance_points=0.3, alpha=0.0625 * 1.001))
    assert (
        v.status == FAIL
        and v.reason
        == "accuracy 49.61% is below the floor 50.00%; accuracy is 0.39 points below production, more than the 0.3 point tolerance; "
        "significantly worse than production (McNemar one-sided p=0.0625 < alpha 0.0625625)"
    )


def test_paired_accuracy_needs_the_same_examples():
    with pytest.raises(ValueError, match=r"paired accuracy needs the same examples: \(3,\) vs \(4,\)"):
        judge_accuracy([True] * 3, [True] * 4, AccuracyPolicy())


def test_fidelity_verdicts_at_and_below_the_threshold():
    fp32 = np.arange(100) % 4
    int8 = fp32.copy()
    int8[:2] += 1
    assert judge_fidelity(int8, fp32, FidelityPolicy(min_top1_agreement=0.98)) == Verdict(
        "int8_fidelity",
        PASS,
        "98.00%",
        ">= 98.00%",
        "INT8 agrees with FP32 on 98.00% of the evaluation split (>= 98.00%)",
        {"top1_agreement": 0.98, "threshold": 0.98},
    )
    assert judge_fidelity(int8, fp32, FidelityPolicy()) == Verdict(
        "int8_fidelity",
        FAIL,
        "98.00%",
        ">= 99.00%",
        "INT8 agrees with FP32 on 98.00% of the evaluation split (< 99.00%)",
        {"top1_agreement": 0.98, "threshold": 0.99},
    )


def _drift_numbers(prediction, inputs, share):
    return {
        "prediction_drift": prediction,
        "input_drift": inputs,
        "input_drifted_share": share,
        "prediction_threshold": 0.1,
        "input_threshold": 0.1,
    }


@pytest.mark.parametrize(
    "prediction, inputs, expected",
    [
        (
            None,
            {"a": 0.0},
            Verdict(
                "drift",
                PASS,
                "pred JS n/a (no production); input drifted 0%",
                "JS < 0.1, drifted < 50%",
                "no prediction or input drift above threshold (no production model: input drift only)",
                _drift_numbers(None, {"a": 0.0}, 0.0),
            ),
        ),
        (
            0.05,
            {"a": 0.0, "b": 0.1, "c": 0.02},
            Verdict(
                "drift",
                PASS,
                "pred JS 0.050; input drifted 33%",
                "JS < 0.1, drifted < 50%",
                "no prediction or input drift above threshold",
                _drift_numbers(0.05, {"a": 0.0, "b": 0.1, "c": 0.02}, 1 / 3),
            ),
        ),
        (
            0.1,
            {"z": 0.1, "a": 0.5, "m": 0.0, "n": 0.0},
            Verdict(
                "drift",
                FAIL,
                "pred JS 0.100; input drifted 50%",
                "JS < 0.1, drifted < 50%",
                "candidate predictions drift from production's on the same traffic (JS distance 0.100 >= 0.1); traffic has drifted from the"
                " reference data in a, z (50% of descriptors); re-validate on current data before promoting",
                _drift_numbers(0.1, {"z": 0.1, "a": 0.5, "m": 0.0, "n": 0.0}, 0.5),
            ),
        ),
    ],
)
def test_drift_verdicts(prediction, inputs, expected):
    assert judge_drift(prediction, inputs, DriftPolicy()) == expected


_UNMEASURED = "a drift that was not measured does not pass: check that the traffic and reference samples hold texts, then gate again"


@pytest.mark.parametrize(
    "prediction, inputs, expected",
    [
        # Issue 17: each of these passed, on a drift nobody measured.
        (
            None,
            {},
            Verdict(
                "drift",
                INCONCLUSIVE,
                "pred JS n/a (no production); input drifted 0%",
                "JS < 0.1, drifted < 50%",
                f"inconclusive: no text descriptor of the traffic was measured against the reference data; {_UNMEASURED}",
                _drift_numbers(None, {}, 0.0),
            ),
        ),
        (
            0.05,
            {},
            Verdict(
                "drift",
                INCONCLUSIVE,
                "pred JS 0.050; input drifted 0%",
                "JS < 0.1, drifted < 50%",
                f"inconclusive: no text descriptor of the traffic was measured against the reference data; {_UNMEASURED}",
                _drift_numbers(0.05, {}, 0.0),
            ),
        ),
        (
            float("nan"),
            {"a": 0.0, "b": 0.0},
            Verdict(
                "drift",
                INCONCLUSIVE,
                "pred JS nan; input drifted 0%",
                "JS < 0.1, drifted < 50%",
                f"inconclusive: the prediction drift against production is nan (no label distribution to compare); {_UNMEASURED}",
                _drift_numbers(float("nan"), {"a": 0.0, "b": 0.0}, 0.0),
            ),
        ),
        (
            0.0,
            {"a": float("nan"), "b": 0.0, "c": float("nan")},
            Verdict(
                "drift",
                INCONCLUSIVE,
                "pred JS 0.000; input drifted 0%",
                "JS < 0.1, drifted < 50%",
                f"inconclusive: the input drift of a, c is not a number; {_UNMEASURED}",
                _drift_numbers(0.0, {"a": float("nan"), "b": 0.0, "c": float("nan")}, 0.0),
            ),
        ),
        # What was measured and failed stays a failure, with what was not measured named too.
        (
            float("nan"),
            {"a": 0.5, "b": 0.0},
            Verdict(
                "drift",
                FAIL,
                "pred JS nan; input drifted 50%",
                "JS < 0.1, drifted < 50%",
                "traffic has drifted from the reference data in a (50% of descriptors); re-validate on current data before promoting; "
                "the prediction drift against production is nan (no label distribution to compare)",
                _drift_numbers(float("nan"), {"a": 0.5, "b": 0.0}, 0.5),
            ),
        ),
    ],
)
def test_a_drift_that_was_not_measured_is_inconclusive_never_a_pass(prediction, inputs, expected):
    got = judge_drift(prediction, inputs, DriftPolicy())
    # NaN != NaN: compare the numbers by their repr, everything else exactly.
    assert (got.gate, got.status, got.measured, got.threshold, got.reason) == (
        expected.gate,
        expected.status,
        expected.measured,
        expected.threshold,
        expected.reason,
    )
    assert repr(got.numbers) == repr(expected.numbers)
    assert not got.passed


def test_live_drift_on_no_descriptor_or_a_nan_one_is_not_judged():
    from modelcd_assets.lib.judging.gates import judge_live_drift

    policy = DriftPolicy()
    n = policy.live_min_records
    empty = judge_live_drift({}, policy, records=n)
    assert (empty.status, empty.measured) == (INCONCLUSIVE, f"input drifted 0% over {n} texts")
    assert empty.reason == f"not judged: no text descriptor of the traffic was measured against the reference data over {n} texts"
    nan = judge_live_drift({"a": float("nan"), "b": 0.0}, policy, records=n)
    assert (nan.status, nan.reason) == (INCONCLUSIVE, f"not judged: the input drift of a is not a number over {n} texts")
    drifted = judge_live_drift({"a": float("nan"), "b": 0.5}, policy, records=n)
    assert drifted.status == FAIL


def _throughput_numbers(median, lo, hi, p99):
    return {"ratio_median": median, "ratio_ci_low": lo, "ratio_ci_high": hi, "p99_ms": p99, "min_ratio": 0.88, "p99_slo_ms": 100.0}


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            (0.5, 0.4, 0.6, 100.0, False),
            Verdict(
                "throughput",
                PASS,
                "p99 100.0 ms",
                "p99 <= 100.0 ms (no production to compare)",
                "first candidate: p99 100.0 ms within the 100.0 ms SLO",
                _throughput_numbers(0.5, 0.4, 0.6, 100.0),
            ),
        ),
        (
            (0.5, 0.4, 0.6, 100.5, False),
            Verdict(
                "throughput",
                FAIL,
                "p99 100.5 ms",
                "p99 <= 100.0 ms (no production to compare)",
                "first candidate: p99 100.5 ms over the 100.0 ms SLO",
                _throughput_numbers(0.5, 0.4, 0.6, 100.5),
            ),
        ),
        (
            (1.0, 0.97, 1.03, 100.5, True),
            Verdict(
                "throughput",
                FAIL,
                "1.00x [0.97, 1.03], p99 100.5 ms",
                ">= 0.88x, p99 <= 100.0 ms",
                "p99 latency 100.5 ms exceeds the 100.0 ms SLO",
                _throughput_numbers(1.0, 0.97, 1.03, 100.5),
            ),
        ),
        (
            (0.6, 0.55, 0.65, 10.0, True),
            Verdict(
                "throughput",
                FAIL,
                "0.60x [0.55, 0.65], p99 10.0 ms",
                ">= 0.88x, p99 <= 100.0 ms",
                "throughput is 0.60x production's, CI [0.55, 0.65] entirely below 0.88",
                _throughput_numbers(0.6, 0.55, 0.65, 10.0),
            ),
        ),
        (
            (0.9, 0.88, 0.95, 10.0, True),
            Verdict(
                "throughput",
                PASS,
                "0.90x [0.88, 0.95], p99 10.0 ms",
                ">= 0.88x, p99 <= 100.0 ms",
                "throughput 0.90x production's, CI [0.88, 0.95] above 0.88",
                _throughput_numbers(0.9, 0.88, 0.95, 10.0),
            ),
        ),
        (
            (0.85, 0.8, 0.88, 10.0, True),
            Verdict(
                "throughput",
                INCONCLUSIVE,
                "0.85x [0.80, 0.88], p99 10.0 ms",
                ">= 0.88x, p99 <= 100.0 ms",
                "inconclusive: median ratio 0.85, CI [0.80, 0.88] straddles 0.88 after the maximum number of pairs; "
                "re-run on a quieter machine (policy on_inconclusive=block)",
                _throughput_numbers(0.85, 0.8, 0.88, 10.0),
            ),
        ),
    ],
)
def test_throughput_verdicts_at_each_boundary(args, expected):
    assert judge_throughput(*args, ThroughputPolicy()) == expected


@pytest.mark.parametrize(
    "predicted, expected",
    [
        (["a", "b"], Verdict("golden", PASS, "2/2 correct", "all", "all 2 golden cases predicted correctly", {"cases": 2, "misses": 0})),
        (
            ["x", "x", "x", "d"],
            Verdict(
                "golden",
                FAIL,
                "1/4 correct",
                "all",
                "'t0': expected a, got x; 't1': expected b, got x; 't2': expected c, got x",
                {"cases": 4, "misses": 3},
            ),
        ),
        (
            ["x", "x", "x", "x"],
            Verdict(
                "golden",
                FAIL,
                "0/4 correct",
                "all",
                "'t0': expected a, got x; 't1': expected b, got x; 't2': expected c, got x (+1 more)",
                {"cases": 4, "misses": 4},
            ),
        ),
    ],
)
def test_golden_verdicts(predicted, expected):
    labels = ["a", "b", "c", "d"][: len(predicted)]
    assert judge_golden(predicted, labels, [f"t{i}" for i in range(len(predicted))]) == expected
    assert judge_golden([], [], []) == Verdict(
        "golden", NO_CASES, "0/0 correct", "all", "no golden cases declared", {"cases": 0, "misses": 0}
    )


def test_gate_details_that_only_show_in_some_cases():
    cand, prod = _paired(24)
    v = judge_accuracy(cand, prod, AccuracyPolicy())
    assert (
        v.numbers["ci_high_points"] < 0 and f"95% CI [{v.numbers['ci_low_points']:+.2f}, {v.numbers['ci_high_points']:+.2f}]" in v.measured
    )
    assert judge_drift(None, {"n_chars": 0.5}, DriftPolicy()).numbers["input_drifted_share"] == 1.0
    assert judge_safety(["a", "b", "c", "d"]).reason == "a; b; c (+1 more)"
    assert (
        judge_probe({"probe_finite": False, "probe_deterministic": False}).measured
        == "probe outputs contain NaN or Inf; the same input twice gave different outputs"
    )


def test_weight_scale_verdicts_at_their_boundaries():
    from modelcd_assets.lib.judging.gates import judge_weight_scale
    from modelcd_assets.lib.judging.policy import HealthPolicy

    policy = HealthPolicy(max_weight_scale_ratio=10)
    edge = judge_weight_scale({"weight_scale_vs_production": {"a": 10.0, "b": 0.1, "c": 1.0}}, policy)
    assert (edge.status, edge.measured, edge.threshold) == (PASS, "10x at the extreme", "within 10x of production")
    assert edge.reason == "every weight matrix within 10x of production's norm" and edge.numbers == {"matrices": 3, "out_of_range": 0}
    over = judge_weight_scale({"weight_scale_vs_production": {"a": 10.01, "b": 0.0999, "c": 1.0, "d": 0.0, "e": 50.0}}, policy)
    assert over.status == FAIL and over.numbers == {"matrices": 5, "out_of_range": 4}
    assert over.reason == "a is 10x production's norm; b is 0.0999x production's norm; d is 0x production's norm; (+1 more)"
    assert over.measured == "0x at the extreme"
    first = judge_weight_scale({}, policy)
    assert (first.status, first.measured) == (PASS, "no production to compare") and "first candidate" in first.reason
    assert judge_weight_scale({}, policy, has_production=False) == first
    assert judge_weight_scale({"weight_scale_vs_production": {"a": 1.0}}, policy, has_production=True) == edge.__class__(
        "weight_scale",
        PASS,
        "1x at the extreme",
        "within 10x of production",
        "every weight matrix within 10x of production's norm",
        {"matrices": 1, "out_of_range": 0},
    )


@pytest.mark.parametrize(
    "report, why",
    [
        ({"weight_scale_vs_production": {}}, "found no weight matrix of the same name and shape in both models"),
        ({}, "was not measured"),
    ],
)
def test_weight_scale_with_a_production_but_nothing_compared_is_inconclusive(report, why):
    """Issue 17: with no comparable matrix the gate passed ('every weight matrix within 10x'), on nothing."""
    from modelcd_assets.lib.judging.gates import judge_weight_scale
    from modelcd_assets.lib.judging.policy import HealthPolicy

    got = judge_weight_scale(report, HealthPolicy(max_weight_scale_ratio=10), has_production=True)
    assert got == Verdict(
        "weight_scale",
        INCONCLUSIVE,
        "0 matrices compared",
        "within 10x of production",
        f"inconclusive: a production model exists but the weight-scale comparison {why}; nothing was compared, so nothing "
        "may pass: re-materialize merged_model, or check that the candidate has production's architecture",
        {"matrices": 0},
    )
    assert not got.passed
    if report:  # an empty comparison says there was a production, with or without the flag
        assert judge_weight_scale(report, HealthPolicy(max_weight_scale_ratio=10)) == got


@pytest.mark.parametrize(
    "inputs", [{}, {"a": 0.0, "b": 0.1, "c": 0.02}, {"z": 0.1, "a": 0.5, "m": 0.0, "n": 0.0}, {"a": 0.09, "b": 0.2}, {"n_chars": 0.5}]
)
def test_live_drift_judges_inputs_by_the_drift_gates_rule(inputs):
    from modelcd_assets.lib.judging.gates import judge_live_drift

    policy = DriftPolicy()
    gate, live = judge_drift(None, inputs, policy), judge_live_drift(inputs, policy, records=policy.live_min_records)
    assert live.status == gate.status
    assert live.numbers["input_drifted_share"] == gate.numbers["input_drifted_share"]
    assert ("live traffic has drifted" in live.reason) == (gate.status == FAIL)


def test_live_drift_fails_on_drifted_inputs_passes_on_calm_ones_and_needs_enough_traffic():
    from modelcd_assets.lib.judging.gates import judge_live_drift

    policy = DriftPolicy(input_numeric_threshold=0.1, input_drift_share=0.5, live_min_records=200)
    drifted = judge_live_drift({"n_chars": 2.0, "digit_share": 5.0, "n_words": 0.01, "n_tokens": 1.5, "mean_word_length": 0.0}, policy, 500)
    assert drifted.status == FAIL and not drifted.passed
    assert drifted.reason.startswith(
        "live traffic has drifted from the reference data in digit_share, n_chars, n_tokens (60% of descriptors)"
    )
    assert drifted.numbers["drifted"] == ["digit_share", "n_chars", "n_tokens"] and drifted.numbers["records"] == 500
    calm = judge_live_drift({"n_chars": 0.02, "digit_share": 0.0, "n_words": 0.01, "n_tokens": 0.03, "mean_word_length": 0.0}, policy, 500)
    assert calm.status == PASS and calm.passed and "0% of descriptors drifted" in calm.reason
    # Too little traffic is reported as such, never as a pass, whatever the (unmeasured) inputs would say.
    few = judge_live_drift(None, policy, 199)
    assert few.status == INCONCLUSIVE and not few.passed
    assert few.reason.startswith("not enough traffic to judge: 199 sampled texts in the window, fewer than drift.live_min_records (200)")
    with pytest.raises(ValueError, match="no input drift was measured"):
        judge_live_drift(None, policy, 200)


def test_a_live_window_smaller_than_its_minimum_is_refused():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"live_window \(100\) must be at least live_min_records \(200\)"):
        DriftPolicy(live_window=100)
    assert DriftPolicy(live_window=200).live_min_records == 200


def test_a_traffic_log_too_small_for_the_live_drift_minimum_is_refused(tmp_path):
    from modelcd_assets.lib.errors import ModelcdError
    from modelcd_assets.lib.judging.policy import load_policy

    f = tmp_path / "m.yaml"
    f.write_text("serving:\n  sample_max: 300\ndrift:\n  live_min_records: 200\n")
    with pytest.raises(
        ModelcdError, match=r"serving.sample_max \(300\) keeps as few as 150 sampled texts, fewer than drift.live_min_records \(200\)"
    ):
        load_policy(f)
    f.write_text("serving:\n  sample_max: 300\n  sample_ratio: 0\ndrift:\n  live_min_records: 200\n")  # sampling off: nothing to fit
    assert load_policy(f).serving.sample_ratio == 0
    f.write_text("serving:\n  sample_max: 400\ndrift:\n  live_min_records: 200\n")
    assert load_policy(f).serving.sample_max == 400


def _recorded(b1=1000.0, b32=4000.0, p99=5.0):
    return {"1": {"candidate_items_per_s": b1, "candidate_p99_ms": p99}, "32": {"candidate_items_per_s": b32, "candidate_p99_ms": 20.0}}


def test_production_recheck_compares_the_median_of_trials_with_the_recorded_figures():
    from modelcd_assets.lib.judging.gates import judge_production_recheck

    policy = ThroughputPolicy(min_ratio=0.88, p99_slo_ms=100)
    latency = [4.0] * 99 + [6.0]
    same = judge_production_recheck({"1": [990.0, 1000.0, 1010.0], "32": [3900.0, 4000.0, 4100.0]}, latency, _recorded(), policy)
    assert same.status == PASS and same.numbers["b1_ratio"] == 1.0 and same.numbers["b32_ratio"] == 1.0
    # One slow trial does not move the median; a slower node moves every trial.
    outlier = judge_production_recheck({"1": [100.0, 1000.0, 1010.0], "32": [3900.0, 4000.0, 4100.0]}, latency, _recorded(), policy)
    assert outlier.status == PASS
    slower = judge_production_recheck({"1": [800.0, 850.0, 870.0], "32": [3900.0, 4000.0, 4100.0]}, latency, _recorded(), policy)
    assert slower.status == FAIL and slower.reason.startswith(
        "batch 1: 850 items/s (median of 3 trials) is 0.85x the 1000 its gate recorded, below 0.88"
    )
    late = judge_production_recheck({"1": [1000.0] * 3, "32": [4000.0] * 3}, [4.0] * 98 + [150.0] * 2, _recorded(), policy)
    assert late.status == FAIL and late.reason.startswith(
        "p99 latency at batch 1 is 150.0 ms, over the 100.0 ms SLO (its gate recorded 5.0 ms)"
    )
    with pytest.raises(ValueError, match="no recorded or no measured throughput at batch 32"):
        judge_production_recheck({"1": [1000.0], "32": [4000.0]}, latency, {"1": _recorded()["1"]}, policy)


def test_live_drift_verdicts_say_exactly_what_was_judged():
    """The whole verdict, as the UI, the registry tag and the server's gauges read it: every field is part of the answer."""
    from modelcd_assets.lib.judging.gates import judge_live_drift
    from modelcd_assets.lib.judging.policy import DriftPolicy

    policy = DriftPolicy()
    base = {"records": 150, "min_records": 200, "input_threshold": 0.1, "input_drift_share": 0.5}
    threshold = "drifted < 50% of descriptors, over >= 200 texts"
    assert judge_live_drift(None, policy, 150).to_dict() == {
        "gate": "live_drift",
        "status": "inconclusive",
        "measured": "150 texts",
        "threshold": threshold,
        "numbers": base,
        "reason": (
            "not enough traffic to judge: 150 sampled texts in the window, fewer than drift.live_min_records (200); "
            "serve more requests or raise serving.sample_ratio"
        ),
    }
    drifted = judge_live_drift({"n_chars": 0.2, "n_words": 0.05}, policy, 300).to_dict()
    assert drifted == {
        "gate": "live_drift",
        "status": "fail",
        "measured": "input drifted 50% over 300 texts",
        "threshold": threshold,
        "numbers": (
            base | {"records": 300, "input_drift": {"n_chars": 0.2, "n_words": 0.05}, "input_drifted_share": 0.5, "drifted": ["n_chars"]}
        ),
        "reason": (
            "live traffic has drifted from the reference data in n_chars (50% of descriptors): production was validated on data "
            "unlike what it now serves; re-validate it on a sample of current traffic"
        ),
    }
    calm = judge_live_drift({"n_chars": 0.05, "n_words": 0.05}, policy, 200).to_dict()  # exactly the minimum is enough
    assert calm["status"] == "pass" and calm["threshold"] == threshold and calm["measured"] == "input drifted 0% over 200 texts"
    assert calm["reason"] == "live traffic is like the reference data: 0% of descriptors drifted (under 50%) over 200 texts"
    assert calm["numbers"]["drifted"] == [] and calm["numbers"]["input_drifted_share"] == 0.0


def test_production_recheck_verdicts_say_exactly_what_was_measured():
    from modelcd_assets.lib.judging.gates import judge_production_recheck
    from modelcd_assets.lib.judging.policy import ThroughputPolicy

    policy = ThroughputPolicy()
    recorded = {"1": {"candidate_items_per_s": 100, "candidate_p99_ms": 6.0}, "32": {"candidate_items_per_s": 400}}
    ok = judge_production_recheck({"1": [100, 110, 90], "32": [400, 300, 420]}, [5.0] * 100, recorded, policy).to_dict()
    assert ok == {
        "gate": "production_recheck",
        "status": "pass",
        "reason": "throughput and p99 still meet the throughput gate's figures",
        "measured": "b1: 100 items/s = 1.00x recorded 100; b32: 400 items/s = 1.00x recorded 400; p99 5.0 ms (recorded 6.0 ms)",
        "threshold": ">= 0.88x recorded, p99 <= 100.0 ms",
        "numbers": {
            "min_ratio": 0.88,
            "p99_slo_ms": 100.0,
            "b1_items_per_s": 100.0,
            "b1_recorded_items_per_s": 100.0,
            "b1_ratio": 1.0,
            "b1_trials": 3,
            "b32_items_per_s": 400.0,
            "b32_recorded_items_per_s": 400.0,
            "b32_ratio": 1.0,
            "b32_trials": 3,
            "p99_ms": 5.0,
            "recorded_p99_ms": 6.0,
        },
    }
    slow = judge_production_recheck({"1": [80, 80, 80], "32": [400]}, [150.0] * 100, recorded, policy).to_dict()
    assert slow["status"] == "fail"
    assert (
        slow["reason"]
        == "batch 1: 80 items/s (median of 3 trials) is 0.80x the 100 its gate recorded, below 0.88; look for a slower node, "
        "a changed library or a busier machine; p99 latency at batch 1 is 150.0 ms, over the 100.0 ms SLO (its gate recorded 6.0 ms)"
    )
    no_p99 = judge_production_recheck({"1": [100]}, [5.0] * 100, {"1": {"candidate_items_per_s": 100}}, policy).to_dict()
    assert no_p99["measured"] == "b1: 100 items/s = 1.00x recorded 100; p99 5.0 ms" and no_p99["numbers"]["recorded_p99_ms"] is None
    with pytest.raises(ValueError, match="no recorded or no measured throughput at batch 32"):
        judge_production_recheck({"32": [1.0]}, [5.0], recorded | {"32": {}}, policy)
