import numpy as np
import pytest

from modelcd_assets.lib.judging.policy import ThroughputPolicy
from modelcd_assets.lib.judging.stats import mcnemar_worse_pvalue, median_ci, median_ci_min_n, paired_bootstrap_ci


def test_mcnemar_identical_models_is_not_worse():
    correct = np.random.default_rng(0).random(2000) < 0.9
    assert mcnemar_worse_pvalue(correct, correct) == 1.0


def test_mcnemar_detects_a_clearly_worse_candidate():
    rng = np.random.default_rng(1)
    prod = rng.random(2000) < 0.9
    cand = prod.copy()
    cand[np.flatnonzero(prod)[:60]] = False  # 60 examples lost, none won
    assert mcnemar_worse_pvalue(cand, prod) < 1e-10
    assert mcnemar_worse_pvalue(prod, cand) == 1.0  # the other direction is "better"


def test_mcnemar_balanced_disagreements_are_not_significant():
    prod = np.array([True] * 50 + [False] * 50 + [True] * 900)
    cand = np.array([False] * 50 + [True] * 50 + [True] * 900)
    assert mcnemar_worse_pvalue(cand, prod) > 0.4


def test_paired_bootstrap_ci_covers_the_true_difference():
    rng = np.random.default_rng(2)
    prod = rng.random(2400) < 0.9
    cand = prod.copy()
    cand[np.flatnonzero(prod)[:48]] = False  # exactly -2 points
    lo, hi = paired_bootstrap_ci(cand, prod, 2000)
    assert lo < -0.02 < hi
    assert hi < 0


@pytest.mark.parametrize("n", [6, 12, 36])
def test_median_ci_brackets_the_median(n):
    x = np.random.default_rng(n).normal(1.0, 0.05, n)
    med, lo, hi = median_ci(x, 0.95)
    assert lo <= med <= hi
    assert lo >= x.min() and hi <= x.max()


def test_median_ci_narrows_with_more_pairs():
    rng = np.random.default_rng(3)
    wide = median_ci(rng.normal(1, 0.1, 8))
    narrow = median_ci(rng.normal(1, 0.1, 200))
    assert (narrow[2] - narrow[1]) < (wide[2] - wide[1])


@pytest.mark.parametrize("confidence, n", [(0.95, 6), (0.9, 5), (0.99, 8), (0.75, 3)])
def test_median_ci_min_n_is_the_fewest_values_reaching_the_confidence(confidence, n):
    assert median_ci_min_n(confidence) == n
    assert 1 - 2 * 0.5**n >= confidence > 1 - 2 * 0.5 ** (n - 1)


@pytest.mark.parametrize("n", [0, 1, 4, 5])
def test_median_ci_refuses_too_few_values_for_its_confidence(n):
    with pytest.raises(ValueError, match=f"a 95% CI on the median needs at least 6 values, got {n}"):
        median_ci(np.arange(n, dtype=float), 0.95)


def _smallest_pairs_the_policy_accepts() -> int:
    for n in range(1, 50):
        try:
            ThroughputPolicy(pairs=n)
            return n
        except ValueError:
            continue
    raise AssertionError("the policy accepts no number of pairs below 50")


def test_the_policy_refuses_four_pairs():
    with pytest.raises(ValueError, match="pairs"):
        ThroughputPolicy(pairs=4)
    assert _smallest_pairs_the_policy_accepts() == median_ci_min_n(ThroughputPolicy().confidence)


DRAWS = 10_000
# Three standard errors of a coverage estimate at the nominal 0.95: a sound interval falls below this by chance about 1 run in 700.
COVERAGE_FLOOR = 0.95 - 3 * np.sqrt(0.95 * 0.05 / DRAWS)


def _coverage(n: int, ranks: tuple[int, int], seed: int) -> float:
    """Share of DRAWS lognormal samples of size n whose (x_lo, x_hi) order-statistic interval contains the true median, 1."""
    x = np.sort(np.random.default_rng(seed).lognormal(0.0, 1.0, (DRAWS, n)), axis=1)
    lo, hi = ranks
    return float(np.mean((x[:, lo] <= 1.0) & (1.0 <= x[:, hi])))


@pytest.mark.parametrize("n", ["policy minimum", 6, 12, 40])
def test_median_ci_reaches_its_confidence_by_simulation(n):
    n = _smallest_pairs_the_policy_accepts() if n == "policy minimum" else n
    # median_ci returns order statistics; read its ranks off 0..n-1, then check them against the real call on some draws.
    _, lo, hi = median_ci(np.arange(n, dtype=float), 0.95)
    ranks = (int(lo), int(hi))
    samples = np.random.default_rng(n).lognormal(0.0, 1.0, (50, n))
    for s in samples:
        x = np.sort(s)
        assert median_ci(s, 0.95)[1:] == (x[ranks[0]], x[ranks[1]])
    assert _coverage(n, ranks, seed=n) >= COVERAGE_FLOOR


def test_the_simulation_catches_the_short_intervals_that_were_allowed():
    # (min, max) of 5 values is what median_ci used to return for n=5; its true coverage is 93.75%.
    assert _coverage(5, (0, 4), seed=5) < COVERAGE_FLOOR


@pytest.mark.parametrize("lost, won, p", [(0, 0, 1.0), (1, 0, 0.5), (0, 1, 1.0), (3, 0, 0.125), (2, 1, 0.5), (4, 0, 0.0625)])
def test_mcnemar_exact_p_values_on_few_disagreements(lost, won, p):
    prod = np.array([True] * lost + [False] * won + [True] * 5)
    cand = np.array([False] * lost + [True] * won + [True] * 5)
    assert mcnemar_worse_pvalue(cand, prod) == pytest.approx(p)


def test_mcnemar_takes_correctness_as_zeros_and_ones():
    prod = np.array([1.0, 1.0, 1.0, 0.0, 1.0])
    cand = np.array([0.0, 0.0, 1.0, 1.0, 1.0])
    assert mcnemar_worse_pvalue(cand, prod) == mcnemar_worse_pvalue(cand.astype(bool), prod.astype(bool)) == pytest.approx(0.5)


def test_paired_bootstrap_ci_is_reproducible_and_resamples_every_example():
    cand, prod = np.array([False, True]), np.array([True, True])  # only the first example differs
    lo, hi = paired_bootstrap_ci(cand, prod, 2000)
    assert (lo, hi) == paired_bootstrap_ci(cand, prod, 2000)
    assert lo == -1.0 and hi == 0.0


def test_paired_bootstrap_ci_matches_the_normal_approximation_on_many_examples():
    # Two coin-flip models disagree on half the examples: the mean difference is close to normal at n=1000.
    rng = np.random.default_rng(5)
    prod, cand = rng.random(1000) < 0.5, rng.random(1000) < 0.5
    diff = cand.astype(float) - prod.astype(float)
    half_width = 1.959964 * diff.std() / np.sqrt(len(diff))
    lo, hi = paired_bootstrap_ci(cand, prod, 10_000)
    assert (hi - lo) / 2 == pytest.approx(half_width, rel=0.04)
    assert (lo + hi) / 2 == pytest.approx(diff.mean(), abs=half_width * 0.05)


@pytest.mark.parametrize("confidence", [0, 1, -0.5, 1.5])
def test_median_ci_min_n_refuses_confidences_outside_0_1(confidence):
    with pytest.raises(ValueError, match=f"confidence must be between 0 and 1, got {confidence}"):
        median_ci_min_n(confidence)


@pytest.mark.parametrize("n, shown", [(4, "87.5"), (1, "0")])
def test_median_ci_says_how_often_too_few_values_cover_the_median(n, shown):
    with pytest.raises(ValueError, match=rf"of {n} covers the median with probability {shown}% only$"):
        median_ci(np.arange(n, dtype=float), 0.95)


@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_median_ci_ranks_are_the_narrowest_reaching_the_confidence(confidence):
    from scipy.stats import binom

    for n in range(median_ci_min_n(confidence), 201):
        # 0-based rank k: the interval (x_k, x_{n-1-k}) misses the median with probability 2 * P(Binom(n, 1/2) <= k).
        k = max(j for j in range(n) if binom.cdf(j, n, 0.5) <= (1 - confidence) / 2)
        assert median_ci(np.arange(n, dtype=float), confidence)[1:] == (k, n - 1 - k), n


def test_median_ci_accepts_an_interval_whose_coverage_equals_the_confidence():
    # Binom(7, 1/2) <= 1 has probability exactly 1/16: (x_1, x_5) covers the median exactly 87.5% of the time.
    assert median_ci(np.arange(7, dtype=float), 0.875) == (3.0, 1.0, 5.0)
