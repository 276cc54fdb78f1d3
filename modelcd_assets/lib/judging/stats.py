"""The statistics behind honest gates: paired accuracy and perplexity tests, and a CI on a median ratio."""

from __future__ import annotations

import numpy as np
from scipy.stats import binom


def mcnemar_worse_pvalue(candidate_correct: np.ndarray, production_correct: np.ndarray) -> float:
    """Exact one-sided McNemar p-value for 'the candidate is less accurate than production'."""
    cand = np.asarray(candidate_correct, bool)
    prod = np.asarray(production_correct, bool)
    lost = int(np.sum(prod & ~cand))  # production right, candidate wrong
    won = int(np.sum(cand & ~prod))
    n = lost + won
    if n == 0:
        return 1.0
    return float(binom.sf(lost - 1, n, 0.5))  # P(X >= lost) under no difference


def paired_bootstrap_ci(
    candidate_correct: np.ndarray, production_correct: np.ndarray, samples: int, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile CI of accuracy(candidate) - accuracy(production), resampling examples in pairs."""
    diff = np.asarray(candidate_correct, np.float64) - np.asarray(production_correct, np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(diff), size=(samples, len(diff)))
    means = diff[idx].mean(axis=1)
    tail = (1 - confidence) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def median_ci_min_n(confidence: float) -> int:
    """Fewest values for which median_ci reaches confidence: its widest interval, (min, max), misses with probability 2 * 0.5**n."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    n = 1
    while 2 * 0.5**n > 1 - confidence:
        n += 1
    return n


def median_ci(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """Median and its distribution-free CI from binomial order statistics; too few values for confidence is a ValueError."""
    x = np.sort(np.asarray(values, np.float64))
    n = len(x)
    need = median_ci_min_n(confidence)
    if n < need:
        raise ValueError(
            f"a {100 * confidence:g}% CI on the median needs at least {need} values, got {n}: "
            f"even (min, max) of {n} covers the median with probability {100 * max(0.0, 1 - 2 * 0.5**n):g}% only"
        )
    alpha = 1 - confidence
    # Largest k with P(Binom(n, 1/2) <= k - 1) <= alpha / 2; the interval is (x_k, x_{n-k+1}).
    k = int(binom.ppf(alpha / 2, n, 0.5))
    if binom.cdf(k, n, 0.5) > alpha / 2:
        k -= 1
    k = max(k, 0)
    lo, hi = x[k], x[n - 1 - k]
    return float(np.median(x)), float(lo), float(hi)


def sign_test_worse_pvalue(candidate_loss: np.ndarray, production_loss: np.ndarray, margin: float) -> float:
    """Exact one-sided sign test for 'the candidate's loss is higher than production's on more examples': an example counts
    as worse or better only when the two differ by more than margin, so numerical noise is a tie, not evidence."""
    diff = np.asarray(candidate_loss, np.float64) - np.asarray(production_loss, np.float64)
    worse, better = int(np.sum(diff > margin)), int(np.sum(diff < -margin))
    n = worse + better
    if n == 0:
        return 1.0
    return float(binom.sf(worse - 1, n, 0.5))  # P(X >= worse) under no difference


def perplexity_change(candidate_nll: np.ndarray, production_nll: np.ndarray, tokens: np.ndarray) -> float:
    """Relative perplexity change, candidate over production, pooled over every token: exp(mean NLL difference) - 1."""
    w = np.asarray(tokens, np.float64)
    diff = np.asarray(candidate_nll, np.float64) - np.asarray(production_nll, np.float64)
    return float(np.expm1(np.sum(diff * w) / np.sum(w)))


def paired_perplexity_ci(
    candidate_nll: np.ndarray, production_nll: np.ndarray, tokens: np.ndarray, samples: int, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile CI of perplexity_change, resampling sequences in pairs (each weighted by its token count)."""
    w = np.asarray(tokens, np.float64)
    diff = (np.asarray(candidate_nll, np.float64) - np.asarray(production_nll, np.float64)) * w
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(diff), size=(samples, len(diff)))
    changes = np.expm1(diff[idx].sum(axis=1) / w[idx].sum(axis=1))
    tail = (1 - confidence) / 2
    return float(np.quantile(changes, tail)), float(np.quantile(changes, 1 - tail))
