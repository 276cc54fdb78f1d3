"""The statistics a rollout step is judged on: two samples of live traffic, the candidate's and production's.

Live samples arrive binned (a Prometheus histogram's buckets, summed over every replica) or raw (a paired sample), so
every test here takes `Binned` values: distinct values with their counts. The shift test is Kayenta's (NetflixACAJudge):
a Mann-Whitney U test with the Hodges-Lehmann estimate of the shift and its confidence interval. Because a rank test
misses a wider spread at the same median (Kayenta #780), the tail gets a test of its own: the ratio of the two p99s
with a bootstrap CI. Rates get Fisher's exact test, which stays exact when most samples are zero (Kayenta #426), and a
confidence bound of how much worse the candidate's rate may be (Newcombe's hybrid score interval, which holds at zero
events): a test that finds no excess in a few dozen requests has not shown there is none (Kayenta #674).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom, fisher_exact, norm

# A raw sample with more distinct values than this is grouped (by rank) into this many, so that the table of pairwise
# differences stays below 1024 x 1024 entries; each group keeps its median value.
MAX_DISTINCT = 1024


@dataclass(frozen=True)
class Binned:
    """A sample as distinct values, ascending, and how often each was seen."""

    values: np.ndarray
    counts: np.ndarray

    def __post_init__(self) -> None:
        if len(self.values) != len(self.counts):
            raise ValueError(f"{len(self.values)} values but {len(self.counts)} counts")
        if np.any(np.asarray(self.counts) < 0):
            raise ValueError("a count is negative")
        if not np.all(np.isfinite(self.values)):
            raise ValueError("a value is NaN or infinite: judge NaN outputs as a rate, not as a latency")

    @classmethod
    def of(cls, samples) -> "Binned":
        """Raw samples; more than MAX_DISTINCT distinct values are grouped by rank, each group at its median."""
        x = np.sort(np.asarray(samples, np.float64).ravel())
        values, counts = np.unique(x, return_counts=True)
        if len(values) > MAX_DISTINCT:
            edges = np.linspace(0, len(x), MAX_DISTINCT + 1).astype(int)
            values = np.array([np.median(x[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)])
            counts = np.diff(edges)
            values, inverse = np.unique(values, return_inverse=True)
            counts = np.bincount(inverse, weights=counts).astype(np.int64)
        return cls(values, counts.astype(np.int64))

    @classmethod
    def from_buckets(cls, bounds: list[float], cumulative: list[float]) -> "Binned":
        """A Prometheus histogram's cumulative `le` buckets (the last bound +Inf): each request counts at its bucket's upper
        bound, and those beyond the last finite bound at that bound, as histogram_quantile reads them."""
        if len(bounds) != len(cumulative):
            raise ValueError(f"{len(bounds)} bucket bounds but {len(cumulative)} counts")
        if len(bounds) < 2:
            raise ValueError("a histogram with only its +Inf bucket has no values to compare")
        if not math.isinf(bounds[-1]):
            raise ValueError(f"a Prometheus histogram's last bucket is le=+Inf, not le={bounds[-1]}")
        counts = np.diff(np.concatenate([[0.0], np.asarray(cumulative, np.float64)]))
        if np.any(counts < -1e-9):
            raise ValueError(f"bucket counts decrease ({list(cumulative)}): not a cumulative histogram")
        # increase() over a window extrapolates, so counts may be fractional; a request is whole.
        counts = np.rint(np.clip(counts, 0, None)).astype(np.int64)
        counts[-2] += counts[-1]
        values, counts = np.asarray(bounds[:-1], np.float64), counts[:-1]
        keep = counts > 0
        return cls(values[keep], counts[keep])

    @property
    def n(self) -> int:
        return int(np.sum(self.counts))

    def mean(self) -> float:
        return float(np.sum(self.values * self.counts) / self.n) if self.n else math.nan

    def quantile(self, q: float) -> float:
        """The smallest value with at least q of the sample at or below it."""
        if not self.n:
            return math.nan
        cum = np.cumsum(self.counts)
        return float(self.values[int(np.searchsorted(cum, math.ceil(q * self.n - 1e-9)))])


@dataclass(frozen=True)
class Shift:
    """candidate - baseline: the Hodges-Lehmann estimate, its CI, the two-sided Mann-Whitney p-value, and the mean ratio."""

    estimate: float
    lower: float
    upper: float
    p_value: float
    mean_ratio: float


def _weighted_order_statistic(d: np.ndarray, w: np.ndarray, k: float) -> float:
    """The k-th smallest (1-based) of values d repeated w times each; d sorted ascending."""
    cum = np.cumsum(w)
    return float(d[min(int(np.searchsorted(cum, k - 1e-9)), len(d) - 1)])


def shift_test(candidate: Binned, baseline: Binned, confidence: float) -> Shift:
    """Mann-Whitney U and the Hodges-Lehmann shift with its distribution-free CI (normal approximation of U's order
    statistics, as R's wilcox.test(conf.int=TRUE) computes it for large samples)."""
    n, m = candidate.n, baseline.n
    if n == 0 or m == 0:
        raise ValueError("a shift test needs values in both samples")
    diffs = (candidate.values[:, None] - baseline.values[None, :]).ravel()
    weights = (candidate.counts[:, None].astype(np.float64) * baseline.counts[None, :]).ravel()
    order = np.argsort(diffs, kind="stable")
    d, w = diffs[order], weights[order]
    total = float(n) * m
    estimate = 0.5 * (
        _weighted_order_statistic(d, w, math.floor((total + 1) / 2)) + _weighted_order_statistic(d, w, math.ceil((total + 1) / 2))
    )
    z = norm.ppf(1 - (1 - confidence) / 2)
    k = math.floor(total / 2 - z * math.sqrt(n * m * (n + m + 1) / 12))
    if k < 1:  # too few values for any interval at this confidence
        lower, upper = -math.inf, math.inf
    else:
        lower, upper = _weighted_order_statistic(d, w, k), _weighted_order_statistic(d, w, total - k + 1)
    # U counts the pairs where the candidate is larger, ties a half.
    u = float(np.sum(w[d > 0]) + 0.5 * np.sum(w[d == 0]))
    pooled = np.concatenate([candidate.values, baseline.values])
    pooled_counts = np.concatenate([candidate.counts, baseline.counts]).astype(np.float64)
    _, inverse = np.unique(pooled, return_inverse=True)
    ties = np.bincount(inverse, weights=pooled_counts)
    big = n + m
    variance = n * m / 12 * ((big + 1) - float(np.sum(ties**3 - ties)) / (big * (big - 1))) if big > 1 else 0.0
    if variance <= 0:  # every value equal: no evidence of any shift
        p_value = 1.0
    else:
        dev = abs(u - n * m / 2) - 0.5
        p_value = float(min(1.0, 2 * norm.sf(max(dev, 0.0) / math.sqrt(variance))))
    base_mean = baseline.mean()
    ratio = candidate.mean() / base_mean if base_mean else (1.0 if candidate.mean() == 0 else math.inf)
    return Shift(estimate, lower, upper, p_value, ratio)


@dataclass(frozen=True)
class TailRatio:
    """candidate's quantile over baseline's, and a percentile bootstrap CI of that ratio."""

    q: float
    candidate: float
    baseline: float
    ratio: float
    lower: float
    upper: float


def _ratio(a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = a / b
    return np.where(b > 0, r, np.where(a > 0, np.inf, 1.0))


def _bootstrap_quantiles(sample: Binned, q: float, resamples: int, rng: np.random.Generator) -> np.ndarray:
    draws = rng.multinomial(sample.n, sample.counts / sample.n, size=resamples)
    cum = np.cumsum(draws, axis=1)
    idx = np.argmax(cum >= math.ceil(q * sample.n - 1e-9), axis=1)
    return sample.values[idx]


def tail_ratio(candidate: Binned, baseline: Binned, q: float, confidence: float, resamples: int = 2000, seed: int = 0) -> TailRatio:
    """The q-quantile ratio, candidate over baseline, each sample resampled on its own (multinomially over its bins)."""
    if candidate.n == 0 or baseline.n == 0:
        raise ValueError("a tail ratio needs values in both samples")
    rng = np.random.default_rng(seed)
    ratios = _ratio(_bootstrap_quantiles(candidate, q, resamples, rng), _bootstrap_quantiles(baseline, q, resamples, rng))
    tail = (1 - confidence) / 2
    cq, bq = candidate.quantile(q), baseline.quantile(q)
    return TailRatio(q, cq, bq, float(_ratio(cq, bq)), float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1 - tail)))


@dataclass(frozen=True)
class Rates:
    """Events over trials in each arm, and Fisher's exact one-sided p-value for 'the candidate's rate is higher' (or lower)."""

    candidate_events: int
    candidate_trials: int
    baseline_events: int
    baseline_trials: int
    p_value: float

    @property
    def candidate_rate(self) -> float:
        return self.candidate_events / self.candidate_trials if self.candidate_trials else math.nan

    @property
    def baseline_rate(self) -> float:
        return self.baseline_events / self.baseline_trials if self.baseline_trials else math.nan


def rate_test(
    candidate_events: int, candidate_trials: int, baseline_events: int, baseline_trials: int, higher_is_worse: bool = True
) -> Rates:
    """Fisher's exact test of the 2x2 table; the alternative is the bad direction."""
    for name, events, trials in (("candidate", candidate_events, candidate_trials), ("baseline", baseline_events, baseline_trials)):
        if not 0 <= events <= trials:
            raise ValueError(f"the {name}'s {events} events are not between 0 and its {trials} trials")
    table = [[candidate_events, candidate_trials - candidate_events], [baseline_events, baseline_trials - baseline_events]]
    p = float(fisher_exact(table, alternative="greater" if higher_is_worse else "less").pvalue)
    return Rates(candidate_events, candidate_trials, baseline_events, baseline_trials, p)


def increase_bound(
    candidate_events: int, candidate_trials: int, baseline_events: int, baseline_trials: int, higher_is_worse: bool, confidence: float
) -> float:
    """How far the candidate's rate may be worse than the baseline's (the bad way, absolute): the one-sided upper bound, at
    `confidence`, of the difference of the two rates, by Newcombe's hybrid score interval (statsmodels)."""
    from statsmodels.stats.proportion import confint_proportions_2indep

    if min(candidate_trials, baseline_trials) < 1:
        raise ValueError("a bound of the rates' difference needs trials in both arms")
    worse, better = (
        ((candidate_events, candidate_trials), (baseline_events, baseline_trials))
        if higher_is_worse
        else ((baseline_events, baseline_trials), (candidate_events, candidate_trials))
    )
    _, upper = confint_proportions_2indep(*worse, *better, method="newcomb", compare="diff", alpha=2 * (1 - confidence))
    return float(upper)


def clean_trials_needed(limit: float, confidence: float) -> float:
    """The fewest trials per arm, neither with an event, whose increase_bound is within limit (Wilson's bound of 0 of n is
    z^2 / (n + z^2)); infinite for a limit of 0, which no sample bounds."""
    if limit <= 0:
        return math.inf
    z = float(norm.ppf(confidence))
    return float(math.ceil(z * z * (1 - limit) / limit))


@dataclass(frozen=True)
class Agreement:
    """Paired answers that agreed, of all pairs; p: how likely this few agreements were if the true share were the minimum."""

    agreed: int
    pairs: int
    minimum: float
    p_value: float
    lower: float  # one-sided Clopper-Pearson lower bound of the share at the test's confidence

    @property
    def share(self) -> float:
        return self.agreed / self.pairs if self.pairs else math.nan


def agreement_test(agreed: int, pairs: int, minimum: float, confidence: float) -> Agreement:
    """Exact binomial test of 'the share of agreeing pairs is below minimum'."""
    from scipy.stats import beta

    if not 0 <= agreed <= pairs:
        raise ValueError(f"{agreed} agreeing pairs is not between 0 and the {pairs} pairs")
    p = float(binom.cdf(agreed, pairs, minimum)) if pairs else 1.0
    lower = float(beta.ppf(1 - confidence, agreed, pairs - agreed + 1)) if agreed else 0.0
    return Agreement(agreed, pairs, minimum, p, lower)
