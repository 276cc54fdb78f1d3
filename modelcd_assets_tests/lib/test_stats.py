import numpy as np
import pytest

from modelcd_assets.lib.stats import mcnemar_worse_pvalue, median_ci, paired_bootstrap_ci


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


@pytest.mark.parametrize("n", [4, 12, 36])
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
