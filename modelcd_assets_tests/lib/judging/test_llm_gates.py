"""The causal-LM verdicts: each fails on a bad measurement and passes on a good one, and says why."""

import numpy as np
import pytest

from modelcd_assets.lib.judging.gates import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    cost_per_unit,
    judge_answer_cost,
    judge_cost,
    judge_generation,
    judge_golden_completions,
    judge_perplexity,
    judge_shared_graph_speed,
    judge_token_fidelity,
)
from modelcd_assets.lib.judging.policy import CostPolicy, GenerationPolicy, PerplexityPolicy, ThroughputPolicy, TokenFidelityPolicy
from modelcd_assets.lib.judging.promotion import NO_CASES
from modelcd_assets.lib.judging.stats import paired_perplexity_ci, perplexity_change, sign_test_worse_pvalue

RNG = np.random.default_rng(0)
PROD = RNG.uniform(1.0, 2.0, 200)
TOKENS = RNG.integers(10, 40, 200)


def test_first_candidate_is_judged_on_the_ceiling_alone_and_says_so():
    ok = judge_perplexity(PROD, None, TOKENS, PerplexityPolicy(max_perplexity=10))
    assert (
        ok.status == PASS
        and "ceiling only" in ok.reason
        and ok.numbers["candidate_perplexity"] == pytest.approx(np.exp(np.average(PROD, weights=TOKENS)))
    )
    high = judge_perplexity(PROD, None, TOKENS, PerplexityPolicy(max_perplexity=2))
    assert high.status == FAIL and "ceiling" in high.reason


def test_identical_and_noise_level_candidates_pass():
    same = judge_perplexity(PROD, PROD, TOKENS, PerplexityPolicy())
    assert same.status == PASS and same.numbers["relative_change"] == 0 and same.numbers["p_worse"] == 1.0
    noise = judge_perplexity(PROD + RNG.uniform(-5e-4, 5e-4, 200), PROD, TOKENS, PerplexityPolicy())
    assert noise.status == PASS, noise.reason


def test_a_worse_candidate_fails_by_tolerance_and_by_the_sign_test():
    worse = judge_perplexity(PROD + 0.05, PROD, TOKENS, PerplexityPolicy())
    assert worse.status == FAIL and "more than the +1.00% allowed" in worse.reason and "sign test" in worse.reason
    assert worse.numbers["ci_low"] > 0.04
    better = judge_perplexity(PROD - 0.05, PROD, TOKENS, PerplexityPolicy())
    assert better.status == PASS and better.numbers["relative_change"] < 0


def test_the_sign_test_blocks_when_the_median_reply_got_worse_by_more_than_the_tolerance():
    # 150 replies +5% each, 50 replies much better: +0.5% pooled, inside the +1%, which the mean alone would let through.
    # The sign test (150 worse, 50 better) is significant, and its effect size, the median reply's change, is +5%.
    diff = RNG.permutation(np.r_[np.full(150, 0.05), np.full(50, -0.13)])
    hidden = judge_perplexity(PROD + diff, PROD, TOKENS, PerplexityPolicy())
    assert hidden.numbers["relative_change"] < 0.01 and hidden.numbers["p_worse"] < 0.05, hidden.numbers
    assert hidden.numbers["median_reply_change"] == pytest.approx(np.expm1(0.05))
    assert (
        hidden.status == FAIL
        and "sign test" in hidden.reason
        and "the median reply by +5.13%" in hidden.reason
        and "perplexity is" not in hidden.reason
    )
    # Worse on every reply by 0.004 nats (+0.4%): significant, but the median reply moved +0.4%, inside the +1%. A
    # retrained seed looks like this; the tolerance says it is allowed, and the reason says both.
    sly = judge_perplexity(PROD + 0.004, PROD, TOKENS, PerplexityPolicy())
    assert sly.numbers["p_worse"] < 0.05 and sly.numbers["median_reply_change"] == pytest.approx(np.expm1(0.004)), sly.numbers
    assert sly.status == PASS and "sign test" in sly.reason and "within the +1.00% allowed" in sly.reason
    # The same shift against a tighter tolerance is blocked, by the mean and by the median reply.
    tight = judge_perplexity(PROD + 0.004, PROD, TOKENS, PerplexityPolicy(max_relative_increase=0.002))
    assert tight.status == FAIL and "the median reply by +0.40%" in tight.reason
    # Most replies much worse but not significantly more of them (a coin's worth): the pooled change blocks, not the test.
    split = judge_perplexity(PROD + np.r_[np.full(100, 0.2), np.full(100, -0.01)], PROD, TOKENS, PerplexityPolicy())
    assert split.numbers["p_worse"] >= 0.05 and split.status == FAIL and "sign test" not in split.reason


def test_unpaired_replies_are_refused():
    with pytest.raises(ValueError, match="same replies"):
        judge_perplexity(PROD, PROD[:10], TOKENS, PerplexityPolicy())
    with pytest.raises(ValueError, match="one mean NLL and one token count"):
        judge_perplexity(PROD, None, TOKENS[:5], PerplexityPolicy())


def test_perplexity_statistics():
    assert perplexity_change(np.array([1.0, 2.0]), np.array([1.0, 1.0]), np.array([1, 3])) == pytest.approx(np.exp(0.75) - 1)
    lo, hi = paired_perplexity_ci(PROD + 0.01, PROD, TOKENS, 500)
    assert lo == pytest.approx(np.expm1(0.01)) and hi == pytest.approx(np.expm1(0.01))
    assert sign_test_worse_pvalue(np.array([1.0, 1.0]), np.array([1.0, 1.0]), 1e-3) == 1.0
    assert sign_test_worse_pvalue(np.full(10, 2.0), np.full(10, 1.0), 1e-3) == pytest.approx(0.5**10)
    assert sign_test_worse_pvalue(np.full(10, 1.0005), np.full(10, 1.0), 1e-3) == 1.0  # inside the margin: ties


FIDELITY = {"positions": 2048, "top1_agreement": 0.95, "top1_in_top5": 0.999, "mean_kl": 5e-3, "perplexity_change": 0.005}


@pytest.mark.parametrize(
    "change, status, words",
    [
        ({}, PASS, ""),
        ({"top1_in_top5": 0.99}, FAIL, "top 5"),
        ({"mean_kl": 0.02}, FAIL, "mean KL"),
        ({"perplexity_change": 0.02}, FAIL, "INT8 perplexity"),
        ({"mean_kl": float("nan")}, FAIL, "mean KL"),
    ],
)
def test_token_fidelity(change, status, words):
    v = judge_token_fidelity(FIDELITY | change, TokenFidelityPolicy())
    assert v.status == status and words in v.reason and "top-1 agreement 95.00%" in v.measured


def _run(**kw):
    return {
        "prompt": "my parcel is late",
        "completion": "we will send it today.",
        "stopped_at_eos": True,
        "finite": True,
        "repeated_ngram_share": 0.0,
    } | kw


@pytest.mark.parametrize(
    "runs, status, words",
    [
        ([_run(), _run()], PASS, ""),
        ([_run(), _run(stopped_at_eos=False)], FAIL, "never stopped"),
        ([_run(finite=False)], FAIL, "non-finite"),
        ([_run(repeated_ngram_share=0.9, completion="the the the")], FAIL, "repeats 90%"),
        ([], FAIL, "nothing was generated"),
    ],
)
def test_generation_health(runs, status, words):
    v = judge_generation({"generations": runs}, GenerationPolicy())
    assert v.status == status and words in v.reason


def test_a_share_of_runaway_generations_may_be_allowed():
    runs = [_run()] * 9 + [_run(stopped_at_eos=False)]
    assert judge_generation({"generations": runs}, GenerationPolicy(min_eos_share=0.9)).status == PASS
    assert judge_generation({"generations": runs}, GenerationPolicy(min_eos_share=0.95)).status == FAIL


def test_golden_completions():
    case = {"prompt": "capital of France?", "expect": "Paris", "match": "contains"}
    assert judge_golden_completions([case | {"completion": "It is Paris."}]).status == PASS
    missed = judge_golden_completions([case | {"completion": "Lyon."}])
    assert missed.status == FAIL and "'Lyon.'" in missed.reason and "contain 'Paris'" in missed.reason
    assert judge_golden_completions([case | {"match": "equals", "completion": " paris "}]).status == PASS
    assert judge_golden_completions([case | {"match": "equals", "completion": "It is Paris."}]).status == FAIL
    none = judge_golden_completions([])
    assert none.status == NO_CASES and none.passed


def _cost(speed, prod=None, ratio=None, unit="tokens"):
    return {"unit": unit, "candidate_units_per_s": speed, "production_units_per_s": prod, "speed_ratio": ratio}


def test_cost_per_token_and_request():
    assert cost_per_unit(0.36, 100.0, 1e6) == pytest.approx(1.0)  # 0.36 $/h / (100 tok/s x 3600 s) x 1e6
    policy = CostPolicy(node_usd_per_hour=0.36, tolerance=0.1, max_usd_per_1m_tokens=2.0)
    assert judge_cost(_cost(100.0, 105.0, [0.95, 0.93, 0.97]), policy).status == PASS  # +5% cost
    slower = judge_cost(_cost(80.0, 100.0, [0.8, 0.78, 0.82]), policy)
    assert (
        slower.status == FAIL
        and "+25.0% per unit against production" in slower.reason
        and slower.numbers["cost_change_at_best"] == pytest.approx(1 / 0.82 - 1)
    )
    # The median ratio says +25%, but the CI reaches a ratio of 0.95 (+5%): not shown to cost more than allowed.
    assert judge_cost(_cost(80.0, 100.0, [0.8, 0.7, 0.95]), policy).status == PASS
    assert judge_cost(_cost(40.0), policy).status == FAIL  # 2.5 $ per 1M over the 2.0 ceiling
    first = judge_cost(_cost(100.0), policy)
    assert first.status == PASS and "production" not in first.threshold
    per_request = judge_cost(_cost(10.0, unit="requests"), CostPolicy(node_usd_per_hour=0.36, max_usd_per_1k_requests=0.005))
    assert (
        per_request.status == FAIL
        and per_request.numbers["candidate_usd"] == pytest.approx(0.01)
        and "1,000 requests" in per_request.reason
    )
    assert judge_cost(_cost(float("nan"), 100.0, [1.0, 1.0, 1.0]), policy).status == INCONCLUSIVE
    assert judge_cost(_cost(100.0, 100.0, [1.0, float("nan"), 1.0]), policy).status == INCONCLUSIVE


SHA = "ab" * 32


def _speed_report(graph=None, scan=None, batches=None, against=None, **timing):
    summary = {
        "pairs": 6,
        "ratio_median": 1.0,
        "ratio_ci_low": 0.97,
        "ratio_ci_high": 1.03,
        "candidate_items_per_s": 120.0,
        "production_items_per_s": 120.0,
        "candidate_p50_ms": 40.0,
        "candidate_p99_ms": 60.0,
    }
    return {
        "served_graph": (
            {"base_build": "b" * 24, "sha256": SHA, "recorded_sha256": SHA, "gated_sha256": SHA, "timed_sha256": SHA} | (graph or {})
        ),
        "adapter_scan": (
            {"file": "adapter.onnx_adapter", "tensors": 4, "values": 1000, "subnormal": 0, "nan": 0, "inf": 0, "per_tensor": {}}
            | (scan or {})
        ),
        "build_timing": (
            {
                "against": against,
                "measured_now": False,
                "measured_at": "2026-01-01T00:00:00+00:00",
                "batches": {c: summary | (batches or {}).get(c, {}) for c in ("1", "4")},
            }
            | timing
        ),
    }


TTFT = ThroughputPolicy(p99_slo_ms=1000.0)


def test_an_adapter_on_its_base_build_is_judged_without_timing_and_says_why():
    ok = judge_shared_graph_speed(_speed_report(), TTFT)
    assert ok.status == PASS and ok.reason.startswith("no per-adapter timing: every adapter of this base runs the base build's graph")
    assert f"sha256 {SHA[:12]}" in ok.reason and "0 subnormal, 0 NaN, 0 Inf of 1000 values" in ok.reason and "the same build" in ok.reason


@pytest.mark.parametrize(
    "graph, words",
    [
        ({"sha256": "cd" * 32}, "not the abababababab recorded when the build was made"),
        ({"gated_sha256": "cd" * 32}, "not the cdcdcdcdcdcd quantized_model judged this adapter on"),
        ({"timed_sha256": "cd" * 32}, "the build's timing was measured on"),
    ],
)
def test_a_changed_base_build_hash_fails(graph, words):
    bad = judge_shared_graph_speed(_speed_report(graph), TTFT)
    assert bad.status == FAIL and words in bad.reason and "would not be served on the graph that was judged" in bad.reason


def test_subnormal_nan_or_inf_served_values_fail_the_scan():
    sub = judge_shared_graph_speed(
        _speed_report(scan={"subnormal": 250, "per_tensor": {"lora_A.q": {"subnormal": 250, "nan": 0, "inf": 0}}}), TTFT
    )
    assert (
        sub.status == FAIL
        and "250 of the adapter's 1000 served values are subnormal (25.000%" in sub.reason
        and "250 in lora_A.q" in sub.reason
    )
    assert sub.numbers["subnormal_values"] == 250
    allowed = judge_shared_graph_speed(
        _speed_report(scan={"subnormal": 1, "per_tensor": {"a": {"subnormal": 1, "nan": 0, "inf": 0}}}),
        TTFT.model_copy(update={"max_subnormal_share": 0.01}),
    )
    assert allowed.status == PASS
    nan = judge_shared_graph_speed(
        _speed_report(scan={"nan": 1, "inf": 2, "per_tensor": {"b": {"subnormal": 0, "nan": 1, "inf": 2}}}),
        TTFT.model_copy(update={"max_subnormal_share": 1.0}),
    )
    assert nan.status == FAIL and "1 NaN and 2 Inf among the adapter's 1000 served values (e.g. 1 in b)" in nan.reason


def test_the_builds_timing_meets_the_ttft_slo_and_another_build_is_judged_against_productions():
    slow = judge_shared_graph_speed(_speed_report(batches={"1": {"candidate_p99_ms": 1500.0}}), TTFT)
    assert slow.status == FAIL and "TTFT p99 is 1500.0 ms, over the 1000 ms SLO" in slow.reason
    against = _speed_report(against="c" * 24)
    assert (
        judge_shared_graph_speed(against, TTFT).status == PASS
        and "against production's build" in judge_shared_graph_speed(against, TTFT).reason
    )
    slower = judge_shared_graph_speed(
        _speed_report(against="c" * 24, batches={"4": {"ratio_median": 0.7, "ratio_ci_low": 0.65, "ratio_ci_high": 0.75}}), TTFT
    )
    assert slower.status == FAIL and "against production's build cccc" in slower.reason and "entirely below 0.88" in slower.reason
    straddles = _speed_report(against="c" * 24, batches={"1": {"ratio_median": 0.9, "ratio_ci_low": 0.8, "ratio_ci_high": 0.95}})
    assert judge_shared_graph_speed(straddles, TTFT).status == INCONCLUSIVE


@pytest.mark.parametrize(
    "report, words",
    [
        ({"served_graph": None}, "were not hashed"),
        ({"adapter_scan": None}, "served values were not scanned"),
        ({"build_timing": None}, "the base build has no timing"),
        (_speed_report({"recorded_sha256": None}), "no hash of the INT8 files recorded when the build was made; delete bbbb"),
        (_speed_report(batches={"1": {"candidate_p99_ms": float("nan")}}), "TTFT p99 is not a number"),
    ],
)
def test_what_was_not_measured_is_inconclusive_never_a_pass(report, words):
    verdict = judge_shared_graph_speed(_speed_report() | report, TTFT)
    assert verdict.status == INCONCLUSIVE and words in verdict.reason and not verdict.passed


def _answers(tokens, prod=None, speed=100.0, ratio=None, production="tiny-reply:1"):
    return {
        "unit": "answers",
        "tokens_per_s": speed,
        "production": production if prod is not None else None,
        "speed_ratio": ratio,
        "answer_tokens": tokens,
        "production_answer_tokens": prod,
        "cut_at_cap": 0,
        "max_new_tokens": 64,
    }


def test_the_cost_of_an_answer_is_its_tokens_times_the_builds_cost_per_token():
    policy = CostPolicy(node_usd_per_hour=0.36, tolerance=0.15, max_usd_per_1m_tokens=2.0, max_usd_per_1k_answers=0.05)
    first = judge_answer_cost(_answers([20, 40]), policy)  # 1 USD per 1M tokens, 30 tokens an answer: 0.03 USD per 1,000
    assert first.status == PASS and first.numbers["usd_per_1k_answers"] == pytest.approx(0.03) and "production" not in first.threshold
    longer = judge_answer_cost(_answers([60, 80]), policy)  # 70 tokens: 0.07
    assert longer.status == FAIL and "0.07 USD per 1,000 answers (70.0 tokens each) is above the ceiling 0.05" in longer.reason
    assert judge_answer_cost(_answers([20, 40], speed=40.0), policy).status == FAIL  # 2.5 USD per 1M tokens


def test_answers_that_run_longer_than_productions_cost_more_per_request_on_the_same_graph():
    policy = CostPolicy(node_usd_per_hour=0.36, tolerance=0.15)
    same = judge_answer_cost(_answers([30, 30], [30, 30]), policy)
    assert same.status == PASS and same.numbers["cost_change"] == 0 and "on the same build" in same.measured
    longer = judge_answer_cost(_answers([40, 40], [30, 30]), policy)
    assert (
        longer.status == FAIL
        and "an answer costs +33.3% against production's: its answers to the same 2 traffic prompts run 40.0 tokens" in longer.reason
    )
    assert judge_answer_cost(_answers([34, 34], [30, 30]), policy).status == PASS  # +13%
    # Another build: its speed ratio counts too, at the CI's fast end.
    faster = judge_answer_cost(_answers([40, 40], [30, 30], ratio=[1.25, 1.2, 1.3]), policy)
    assert faster.status == PASS and faster.numbers["cost_change_at_best"] == pytest.approx(4 / 3 / 1.3 - 1)


@pytest.mark.parametrize(
    "cost, words",
    [
        (_answers([30], speed=float("nan")), "tokens/s is not measured"),
        (_answers([]), "answers to the traffic prompts were not found in its drift report"),
        (_answers([30, 30], [30]), "production tiny-reply:1's answers to the same traffic prompts were not found"),
        (_answers([30], [30], ratio=[1.0, float("nan"), 1.0]), "paired speed ratio against production's build is not a number"),
    ],
)
def test_an_answer_cost_not_measured_is_inconclusive(cost, words):
    verdict = judge_answer_cost(cost, CostPolicy())
    assert verdict.status == INCONCLUSIVE and words in verdict.reason and not verdict.passed


# What each causal-LM verdict says, word for word and number for number (a user reads these on the gate report): one
# snapshot per case, failing and passing alike.
SNAPSHOT_CASES = {
    "perplexity_first_pass": lambda: judge_perplexity(PROD, None, TOKENS, PerplexityPolicy(max_perplexity=10)),
    "perplexity_first_over_ceiling": lambda: judge_perplexity(PROD, None, TOKENS, PerplexityPolicy(max_perplexity=2)),
    "perplexity_same": lambda: judge_perplexity(PROD, PROD, TOKENS, PerplexityPolicy()),
    "perplexity_worse": lambda: judge_perplexity(PROD + 0.05, PROD, TOKENS, PerplexityPolicy(max_perplexity=4)),
    "perplexity_slightly_worse_everywhere": lambda: judge_perplexity(PROD + 0.004, PROD, TOKENS, PerplexityPolicy()),
    "perplexity_better": lambda: judge_perplexity(PROD - 0.05, PROD, TOKENS, PerplexityPolicy(bootstrap_samples=500)),
    "perplexity_worse_on_few_replies": lambda: judge_perplexity(
        np.r_[PROD[:190], PROD[190:] + 0.5], PROD, TOKENS, PerplexityPolicy(alpha=0.01)
    ),
    "fidelity_pass": lambda: judge_token_fidelity(FIDELITY, TokenFidelityPolicy()),
    "fidelity_every_problem": lambda: judge_token_fidelity(
        FIDELITY | {"top1_in_top5": 0.9, "mean_kl": 0.5, "perplexity_change": 0.2}, TokenFidelityPolicy()
    ),
    "fidelity_at_the_thresholds": lambda: judge_token_fidelity(
        FIDELITY | {"top1_in_top5": 0.997, "mean_kl": 0.01, "perplexity_change": 0.01}, TokenFidelityPolicy()
    ),
    "generation_pass": lambda: judge_generation({"generations": [_run(), _run(repeated_ngram_share=0.25)]}, GenerationPolicy()),
    "generation_every_problem": lambda: judge_generation(
        {
            "generations": [
                _run(),
                _run(stopped_at_eos=False, prompt="where is my parcel"),
                _run(finite=False, prompt="refund please"),
                _run(repeated_ngram_share=0.75, completion="the the the the"),
            ]
        },
        GenerationPolicy(max_new_tokens=32, ngram=2),
    ),
    "generation_at_the_thresholds": lambda: judge_generation(
        {"generations": [_run(repeated_ngram_share=0.5)] * 3 + [_run(stopped_at_eos=False)]}, GenerationPolicy(min_eos_share=0.75)
    ),
    "generation_nothing": lambda: judge_generation({"generations": []}, GenerationPolicy()),
    "golden_pass": lambda: judge_golden_completions(
        [
            {"prompt": "capital of France?", "expect": "Paris", "match": "contains", "completion": "Paris."},
            {"prompt": "say ok", "expect": "OK", "match": "equals", "completion": " ok "},
        ]
    ),
    "golden_missed": lambda: judge_golden_completions(
        [
            {"prompt": "capital of France?", "expect": "Paris", "match": "contains", "completion": "Lyon."},
            {"prompt": "say ok", "expect": "OK", "match": "equals", "completion": "ok then"},
        ]
    ),
    "golden_missed_equals": lambda: judge_golden_completions(
        [{"prompt": "say ok", "expect": "OK", "match": "equals", "completion": "ok then"}]
    ),
    "golden_none": lambda: judge_golden_completions([]),
    "cost_pass_against_production": lambda: judge_cost(
        _cost(100.0, 105.0, [0.95, 0.93, 0.97]), CostPolicy(node_usd_per_hour=0.36, tolerance=0.1)
    ),
    "cost_more_than_allowed": lambda: judge_cost(
        _cost(80.0, 100.0, [0.8, 0.78, 0.82]), CostPolicy(node_usd_per_hour=0.36, tolerance=0.1, max_usd_per_1m_tokens=1.1)
    ),
    "cost_within_tolerance_at_the_speed_cis_best": lambda: judge_cost(
        _cost(80.0, 100.0, [0.8, 0.7, 0.91]), CostPolicy(node_usd_per_hour=0.36, tolerance=0.1)
    ),
    "cost_first_over_ceiling": lambda: judge_cost(_cost(40.0), CostPolicy(node_usd_per_hour=0.36, max_usd_per_1m_tokens=2.0)),
    "cost_first_at_ceiling": lambda: judge_cost(_cost(50.0), CostPolicy(node_usd_per_hour=0.36, max_usd_per_1m_tokens=2.0)),
    "cost_requests": lambda: judge_cost(_cost(10.0, unit="requests"), CostPolicy(node_usd_per_hour=0.36, max_usd_per_1k_requests=0.005)),
    "cost_not_measured": lambda: judge_cost(_cost(float("nan"), 100.0, [1.0, 1.0, 1.0]), CostPolicy()),
    "cost_ratio_not_measured": lambda: judge_cost(_cost(100.0, 100.0, [1.0, float("nan"), 1.0], unit="requests"), CostPolicy()),
    "speed_on_the_base_build": lambda: judge_shared_graph_speed(_speed_report(), TTFT),
    "speed_subnormal_values": lambda: judge_shared_graph_speed(
        _speed_report(scan={"subnormal": 250, "per_tensor": {"a": {"subnormal": 250, "nan": 0, "inf": 0}}}), TTFT
    ),
    "speed_graph_changed": lambda: judge_shared_graph_speed(_speed_report({"sha256": "cd" * 32}), TTFT),
    "speed_against_productions_build": lambda: judge_shared_graph_speed(_speed_report(against="c" * 24), TTFT),
    "speed_not_timed": lambda: judge_shared_graph_speed(_speed_report() | {"build_timing": None}, TTFT),
    "answer_cost_first": lambda: judge_answer_cost(_answers([20, 40]), CostPolicy(node_usd_per_hour=0.36)),
    "answer_cost_longer_than_production": lambda: judge_answer_cost(_answers([40, 40], [30, 30]), CostPolicy(node_usd_per_hour=0.36)),
    "answer_cost_another_build": lambda: judge_answer_cost(
        _answers([40, 40], [30, 30], ratio=[1.25, 1.2, 1.3]), CostPolicy(node_usd_per_hour=0.36)
    ),
    "answer_cost_not_measured": lambda: judge_answer_cost(_answers([]), CostPolicy()),
}


def _to_ten_digits(value):
    """Floats to 10 significant digits: numpy's reductions sum in another order on another CPU's SIMD (the perplexity change of
    perplexity_worse_on_few_replies ended ...932 on AVX-512 and ...935 on an AVX2-only AMD EPYC), and the verdicts' numbers
    are pinned, not the last bits of their arithmetic."""
    if isinstance(value, float):
        return float(f"{value:.10g}")
    if isinstance(value, dict):
        return {k: _to_ten_digits(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_ten_digits(v) for v in value)
    return value


@pytest.mark.parametrize("case", list(SNAPSHOT_CASES))
def test_each_causal_lm_verdict_says_exactly_what_it_measured(case, snapshot):
    assert _to_ten_digits(SNAPSHOT_CASES[case]().to_dict()) == snapshot


def test_the_perplexity_statistics_exactly():
    w = np.array([1, 3, 2])
    cand, prod = np.array([1.0, 2.0, 1.5]), np.array([1.0, 1.0, 1.0])
    assert perplexity_change(cand, prod, w) == pytest.approx(np.expm1((0 * 1 + 1 * 3 + 0.5 * 2) / 6))
    assert perplexity_change(prod, cand, w) == pytest.approx(np.expm1(-(0 * 1 + 1 * 3 + 0.5 * 2) / 6))
    lo, hi = paired_perplexity_ci(cand, prod, w, 400, confidence=0.9, seed=3)
    rng = np.random.default_rng(3)
    idx = rng.integers(0, 3, size=(400, 3))
    changes = np.expm1(((cand - prod) * w)[idx].sum(axis=1) / w[idx].sum(axis=1))
    assert (lo, hi) == (pytest.approx(np.quantile(changes, 0.05)), pytest.approx(np.quantile(changes, 0.95)))
    # A sign test counts only differences beyond the margin, each way.
    diff = np.array([0.5, 0.5, 0.5, -0.5, 0.0005, -0.0005])
    assert sign_test_worse_pvalue(diff, np.zeros(6), 1e-3) == pytest.approx(0.3125)  # 3 worse, 1 better: P(X >= 3 | n=4)
    assert sign_test_worse_pvalue(-diff, np.zeros(6), 1e-3) == pytest.approx(0.9375)  # 1 worse, 3 better
    assert sign_test_worse_pvalue(np.array([1e-3, -1e-3]), np.zeros(2), 1e-3) == 1.0  # exactly at the margin: ties
    assert sign_test_worse_pvalue(np.array([0.01]), np.zeros(1), 0.0) == pytest.approx(0.5)
    assert cost_per_unit(0.36, 0.0, 1e6) == float("inf") and cost_per_unit(0.36, 200.0, 1e3) == pytest.approx(0.0005)
