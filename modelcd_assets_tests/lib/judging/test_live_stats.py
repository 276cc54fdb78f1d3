"""The live tests against scipy and R's textbook values, on raw and on binned samples."""

import math

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from modelcd_assets.lib.judging.live_stats import Binned, agreement_test, rate_test, shift_test, tail_ratio


def test_binned_of_raw_samples_keeps_every_value():
    b = Binned.of([3.0, 1.0, 1.0, 2.0])
    assert b.values.tolist() == [1.0, 2.0, 3.0] and b.counts.tolist() == [2, 1, 1]
    assert b.n == 4 and b.mean() == pytest.approx(1.75) and b.quantile(0.5) == 1.0 and b.quantile(0.99) == 3.0


def test_many_distinct_values_are_grouped_by_rank_keeping_their_count_and_order():
    x = np.random.default_rng(0).lognormal(size=5000)
    b = Binned.of(x)
    assert len(b.values) <= 1024 and b.n == 5000 and np.all(np.diff(b.values) > 0)
    assert b.quantile(0.5) == pytest.approx(np.median(x), rel=0.01)


def test_prometheus_buckets_become_counts_at_their_upper_bounds_with_inf_at_the_last_finite_bound():
    b = Binned.from_buckets([0.01, 0.05, 0.1, math.inf], [2, 2, 7, 9])
    assert b.values.tolist() == [0.01, 0.1] and b.counts.tolist() == [2, 7]
    with pytest.raises(ValueError, match="le=\\+Inf"):
        Binned.from_buckets([0.01, 0.05], [1, 2])
    with pytest.raises(ValueError, match="decrease"):
        Binned.from_buckets([0.01, math.inf], [5, 2])
    with pytest.raises(ValueError, match="NaN"):
        Binned(np.array([math.nan]), np.array([1]))


def test_shift_matches_scipy_and_the_hodges_lehmann_estimate():
    rng = np.random.default_rng(1)
    base, cand = rng.normal(10, 1, 300), rng.normal(10.5, 1, 300)
    shift = shift_test(Binned.of(cand), Binned.of(base), 0.98)
    expected_p = mannwhitneyu(cand, base, alternative="two-sided", method="asymptotic").pvalue
    assert shift.p_value == pytest.approx(expected_p, rel=1e-6)
    assert shift.estimate == pytest.approx(np.median(np.subtract.outer(cand, base)), abs=1e-9)
    assert shift.lower < 0.5 < shift.upper and shift.lower > 0  # a real half-unit shift, found
    same = shift_test(Binned.of(base), Binned.of(base), 0.98)
    assert same.estimate == 0 and same.lower <= 0 <= same.upper and same.p_value == pytest.approx(1.0)


def test_shift_on_binned_samples_equals_the_shift_on_their_expansion():
    cand = Binned(np.array([0.01, 0.02, 0.05]), np.array([40, 50, 10]))
    base = Binned(np.array([0.01, 0.02, 0.05]), np.array([60, 35, 5]))
    a = shift_test(cand, base, 0.95)
    raw_c, raw_b = np.repeat(cand.values, cand.counts), np.repeat(base.values, base.counts)
    assert a.p_value == pytest.approx(mannwhitneyu(raw_c, raw_b, method="asymptotic").pvalue, rel=1e-6)
    assert a.estimate == pytest.approx(np.median(np.subtract.outer(raw_c, raw_b)))


def test_a_tiny_sample_gets_an_unbounded_interval():
    s = shift_test(Binned.of([1.0, 2.0]), Binned.of([1.5]), 0.98)
    assert s.lower == -math.inf and s.upper == math.inf


def test_tail_ratio_sees_a_wider_spread_at_the_same_median_where_the_rank_test_does_not():
    rng = np.random.default_rng(2)
    base = rng.normal(50, 2, 2000)
    wide = np.concatenate([rng.normal(50, 2, 1940), rng.normal(90, 5, 60)])  # 3% of requests twice as slow, same median
    shift = shift_test(Binned.of(wide), Binned.of(base), 0.98)
    assert abs(shift.estimate) < 0.5  # the rank test's shift is ~0
    tail = tail_ratio(Binned.of(wide), Binned.of(base), 0.99, 0.98)
    assert tail.lower > 1.4 and tail.ratio > 1.5
    same = tail_ratio(Binned.of(base), Binned.of(rng.normal(50, 2, 2000)), 0.99, 0.98)
    assert same.lower < 1.0 < same.upper


def test_rates_stay_exact_when_most_samples_are_zero():
    worse = rate_test(10, 200, 0, 200)  # 5% errors against none
    assert worse.p_value < 0.002 and worse.candidate_rate == 0.05 and worse.baseline_rate == 0.0
    same = rate_test(0, 200, 0, 200)
    assert same.p_value == 1.0
    better_is_not_worse = rate_test(0, 200, 10, 200)
    assert better_is_not_worse.p_value == 1.0
    lower_is_worse = rate_test(150, 200, 195, 200, higher_is_worse=False)  # EOS reached less often
    assert lower_is_worse.p_value < 1e-6
    with pytest.raises(ValueError, match="between 0"):
        rate_test(5, 3, 0, 10)


def test_agreement_is_tested_against_its_minimum():
    low = agreement_test(160, 200, 0.9, 0.98)
    assert low.p_value < 0.001 and low.share == 0.8 and low.lower < 0.8
    fine = agreement_test(198, 200, 0.9, 0.98)
    assert fine.p_value > 0.5 and fine.lower > 0.95
