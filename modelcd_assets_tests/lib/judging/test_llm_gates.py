"""The causal-LM verdicts: each fails on a bad measurement and passes on a good one, and says why."""

import numpy as np
import pytest

from modelcd_assets.lib.judging.gates import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    cost_per_unit,
    judge_cost,
    judge_generation,
    judge_golden_completions,
    judge_perplexity,
    judge_token_fidelity,
)
from modelcd_assets.lib.judging.policy import CostPolicy, GenerationPolicy, PerplexityPolicy, TokenFidelityPolicy
from modelcd_assets.lib.judging.promotion import NO_CASES
from modelcd_assets.lib.judging.stats import paired_perplexity_ci, perplexity_change, sign_test_worse_pvalue

RNG = np.random.default_rng(0)
PROD = RNG.uniform(1.0, 2.0, 200)
TOKENS = RNG.integers(10, 40, 200)


def test_first_candidate_is_judged_on_the_ceiling_alone_and_says_so():
    ok = judge_perplexity(PROD, None, TOKENS, PerplexityPolicy(max_perplexity=10))
    assert ok.status == PASS and "ceiling only" in ok.reason and ok.numbers["candidate_perplexity"] == pytest.approx(np.exp(np.average(PROD, weights=TOKENS)))
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
    # Slightly worse on most replies, within the tolerance on average: the paired test alone blocks it.
    sly = judge_perplexity(PROD + 0.004, PROD, TOKENS, PerplexityPolicy())
    assert sly.status == FAIL and "allowed" not in sly.reason and "sign test" in sly.reason
    better = judge_perplexity(PROD - 0.05, PROD, TOKENS, PerplexityPolicy())
    assert better.status == PASS and better.numbers["relative_change"] < 0


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


@pytest.mark.parametrize("change, status, words", [
    ({}, PASS, ""),
    ({"top1_in_top5": 0.99}, FAIL, "top 5"),
    ({"mean_kl": 0.02}, FAIL, "mean KL"),
    ({"perplexity_change": 0.02}, FAIL, "INT8 perplexity"),
    ({"mean_kl": float("nan")}, FAIL, "mean KL"),
])
def test_token_fidelity(change, status, words):
    v = judge_token_fidelity(FIDELITY | change, TokenFidelityPolicy())
    assert v.status == status and words in v.reason and "top-1 agreement 95.00%" in v.measured


def _run(**kw):
    return {"prompt": "my parcel is late", "completion": "we will send it today.", "stopped_at_eos": True, "finite": True,
            "repeated_ngram_share": 0.0} | kw


@pytest.mark.parametrize("runs, status, words", [
    ([_run(), _run()], PASS, ""),
    ([_run(), _run(stopped_at_eos=False)], FAIL, "never stopped"),
    ([_run(finite=False)], FAIL, "non-finite"),
    ([_run(repeated_ngram_share=0.9, completion="the the the")], FAIL, "repeats 90%"),
    ([], FAIL, "nothing was generated"),
])
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
    assert slower.status == FAIL and "+25.0% per unit against production" in slower.reason and slower.numbers["cost_change_at_best"] == pytest.approx(1 / 0.82 - 1)
    # The median ratio says +25%, but the CI reaches a ratio of 0.95 (+5%): not shown to cost more than allowed.
    assert judge_cost(_cost(80.0, 100.0, [0.8, 0.7, 0.95]), policy).status == PASS
    assert judge_cost(_cost(40.0), policy).status == FAIL  # 2.5 $ per 1M over the 2.0 ceiling
    first = judge_cost(_cost(100.0), policy)
    assert first.status == PASS and "production" not in first.threshold
    per_request = judge_cost(_cost(10.0, unit="requests"), CostPolicy(node_usd_per_hour=0.36, max_usd_per_1k_requests=0.005))
    assert per_request.status == FAIL and per_request.numbers["candidate_usd"] == pytest.approx(0.01) and "1,000 requests" in per_request.reason
    assert judge_cost(_cost(float("nan"), 100.0, [1.0, 1.0, 1.0]), policy).status == INCONCLUSIVE
    assert judge_cost(_cost(100.0, 100.0, [1.0, float("nan"), 1.0]), policy).status == INCONCLUSIVE


# What each causal-LM verdict says, word for word and number for number (a user reads these on the gate report): one
# snapshot per case, failing and passing alike.
SNAPSHOT_CASES = {
    "perplexity_first_pass": lambda: judge_perplexity(PROD, None, TOKENS, PerplexityPolicy(max_perplexity=10)),
    "perplexity_first_over_ceiling": lambda: judge_perplexity(PROD, None, TOKENS, PerplexityPolicy(max_perplexity=2)),
    "perplexity_same": lambda: judge_perplexity(PROD, PROD, TOKENS, PerplexityPolicy()),
    "perplexity_worse": lambda: judge_perplexity(PROD + 0.05, PROD, TOKENS, PerplexityPolicy(max_perplexity=4)),
    "perplexity_slightly_worse_everywhere": lambda: judge_perplexity(PROD + 0.004, PROD, TOKENS, PerplexityPolicy()),
    "perplexity_better": lambda: judge_perplexity(PROD - 0.05, PROD, TOKENS, PerplexityPolicy(bootstrap_samples=500)),
    "perplexity_worse_on_few_replies": lambda: judge_perplexity(np.r_[PROD[:190], PROD[190:] + 0.5], PROD, TOKENS, PerplexityPolicy(alpha=0.01)),
    "fidelity_pass": lambda: judge_token_fidelity(FIDELITY, TokenFidelityPolicy()),
    "fidelity_every_problem": lambda: judge_token_fidelity(FIDELITY | {"top1_in_top5": 0.9, "mean_kl": 0.5, "perplexity_change": 0.2}, TokenFidelityPolicy()),
    "fidelity_at_the_thresholds": lambda: judge_token_fidelity(FIDELITY | {"top1_in_top5": 0.997, "mean_kl": 0.01, "perplexity_change": 0.01},
                                                               TokenFidelityPolicy()),
    "generation_pass": lambda: judge_generation({"generations": [_run(), _run(repeated_ngram_share=0.25)]}, GenerationPolicy()),
    "generation_every_problem": lambda: judge_generation({"generations": [
        _run(), _run(stopped_at_eos=False, prompt="where is my parcel"), _run(finite=False, prompt="refund please"),
        _run(repeated_ngram_share=0.75, completion="the the the the")]}, GenerationPolicy(max_new_tokens=32, ngram=2)),
    "generation_at_the_thresholds": lambda: judge_generation({"generations": [_run(repeated_ngram_share=0.5)] * 3 + [_run(stopped_at_eos=False)]},
                                                             GenerationPolicy(min_eos_share=0.75)),
    "generation_nothing": lambda: judge_generation({"generations": []}, GenerationPolicy()),
    "golden_pass": lambda: judge_golden_completions([{"prompt": "capital of France?", "expect": "Paris", "match": "contains", "completion": "Paris."},
                                                     {"prompt": "say ok", "expect": "OK", "match": "equals", "completion": " ok "}]),
    "golden_missed": lambda: judge_golden_completions([{"prompt": "capital of France?", "expect": "Paris", "match": "contains", "completion": "Lyon."},
                                                       {"prompt": "say ok", "expect": "OK", "match": "equals", "completion": "ok then"}]),
    "golden_missed_equals": lambda: judge_golden_completions([{"prompt": "say ok", "expect": "OK", "match": "equals", "completion": "ok then"}]),
    "golden_none": lambda: judge_golden_completions([]),
    "cost_pass_against_production": lambda: judge_cost(_cost(100.0, 105.0, [0.95, 0.93, 0.97]), CostPolicy(node_usd_per_hour=0.36, tolerance=0.1)),
    "cost_more_than_allowed": lambda: judge_cost(_cost(80.0, 100.0, [0.8, 0.78, 0.82]), CostPolicy(node_usd_per_hour=0.36, tolerance=0.1,
                                                                                                   max_usd_per_1m_tokens=1.1)),
    "cost_within_tolerance_at_the_speed_cis_best": lambda: judge_cost(_cost(80.0, 100.0, [0.8, 0.7, 0.91]), CostPolicy(node_usd_per_hour=0.36, tolerance=0.1)),
    "cost_first_over_ceiling": lambda: judge_cost(_cost(40.0), CostPolicy(node_usd_per_hour=0.36, max_usd_per_1m_tokens=2.0)),
    "cost_first_at_ceiling": lambda: judge_cost(_cost(50.0), CostPolicy(node_usd_per_hour=0.36, max_usd_per_1m_tokens=2.0)),
    "cost_requests": lambda: judge_cost(_cost(10.0, unit="requests"), CostPolicy(node_usd_per_hour=0.36, max_usd_per_1k_requests=0.005)),
    "cost_not_measured": lambda: judge_cost(_cost(float("nan"), 100.0, [1.0, 1.0, 1.0]), CostPolicy()),
    "cost_ratio_not_measured": lambda: judge_cost(_cost(100.0, 100.0, [1.0, float("nan"), 1.0], unit="requests"), CostPolicy()),
}


@pytest.mark.parametrize("case", list(SNAPSHOT_CASES))
def test_each_causal_lm_verdict_says_exactly_what_it_measured(case, snapshot):
    assert SNAPSHOT_CASES[case]().to_dict() == snapshot


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
