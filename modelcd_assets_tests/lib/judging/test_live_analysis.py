"""A rollout step's judge: each kind of live metric fails on a bad candidate and passes a good one; no data pauses; a
critical failure aborts; the rollout section is validated against its task's metrics, naming what it refuses."""

import numpy as np
import pytest

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.live_analysis import (
    FAIL,
    GOOD,
    HIGH,
    INCONCLUSIVE,
    LOW,
    NODATA,
    PASS,
    AgreementSample,
    PairedSample,
    RateSample,
    ShiftSample,
    judge_metric,
    judge_step,
    refuse_foreign_rollout,
    step_metrics,
)
from modelcd_assets.lib.judging.live_stats import Binned
from modelcd_assets.lib.judging.policy import Policy
from modelcd_assets.lib.judging.rollout_policy import LiveMetricPolicy, RolloutPolicy, duration_seconds
from modelcd_assets.lib.tasks.names import CAUSAL_LM, CLASSIFICATION, LiveMetric, declaration_of

LATENCY = LiveMetric("latency_ms", "shift", ("h",), "latency", scale=1000.0)
ERRORS = LiveMetric("error_rate", "rate", ("e", "n"), "errors", critical=True)
EOS = LiveMetric("eos_share", "rate", ("e", "n"), "EOS reached", higher_is_worse=False)
AGREE = LiveMetric("label_agreement", "agreement", ("a", "n"), "agreement", arms=("shadow",))
LENGTH = LiveMetric("length_ratio", "paired_shift", ("d",), "log2 length ratio", defaults=(("max_shift", 0.5),), arms=("shadow",))
RNG = np.random.default_rng(0)
DEFAULT = LiveMetricPolicy()


def latency(ms: float, n: int, spread: float = 2.0):
    return Binned.of(RNG.normal(ms, spread, n) / 1000)


def test_a_slower_candidate_is_high_and_an_equal_one_passes():
    slow = judge_metric(LATENCY, ShiftSample(latency(60, 400), latency(40, 400)), DEFAULT, 100, 0.98)
    assert slow.outcome == HIGH and slow.failed and slow.measured["mean_ratio"] == pytest.approx(1.5, rel=0.02)
    assert "higher" in slow.reason and slow.measured["shift"] == pytest.approx(20, abs=1)  # in ms: scaled
    same = judge_metric(LATENCY, ShiftSample(latency(40, 400), latency(40, 400)), DEFAULT, 100, 0.98)
    assert same.outcome == GOOD


def test_a_significant_shift_under_the_effect_size_floor_passes():
    # 2% slower with a tight spread: significant, but below the 1.1 mean-ratio floor.
    small = judge_metric(LATENCY, ShiftSample(latency(40.8, 2000, 0.2), latency(40, 2000, 0.2)), DEFAULT, 100, 0.98)
    assert small.measured["shift_lower"] > 0 and small.outcome == GOOD
    strict = judge_metric(
        LATENCY, ShiftSample(latency(40.8, 2000, 0.2), latency(40, 2000, 0.2)), LiveMetricPolicy(max_mean_ratio=1.01), 100, 0.98
    )
    assert strict.outcome == HIGH


def test_a_wider_tail_at_the_same_median_fails_on_the_tail():
    base = Binned.of(RNG.normal(40, 2, 2000) / 1000)
    wide = Binned.of(np.concatenate([RNG.normal(40, 2, 1940), RNG.normal(90, 5, 60)]) / 1000)
    j = judge_metric(LATENCY, ShiftSample(wide, base), DEFAULT, 100, 0.98)
    assert j.outcome == HIGH and j.reason.startswith("tail")


def test_too_few_samples_in_either_arm_is_no_data():
    j = judge_metric(LATENCY, ShiftSample(latency(90, 20), latency(40, 400)), DEFAULT, 100, 0.98)
    assert j.outcome == NODATA and "20 candidate" in j.reason and "100 needed" in j.reason


def test_rates_fail_on_errors_mostly_zero_and_on_eos_reached_less_often():
    bad = judge_metric(ERRORS, RateSample(10, 200, 0, 200), DEFAULT, 100, 0.98)
    assert bad.outcome == HIGH and bad.critical
    fine = judge_metric(ERRORS, RateSample(0, 500, 0, 500), DEFAULT, 100, 0.98)
    assert fine.outcome == GOOD and fine.measured["worse_by_upper"] <= 0.01, fine
    fewer_eos = judge_metric(EOS, RateSample(140, 200, 198, 200), DEFAULT, 100, 0.98)
    assert fewer_eos.outcome == LOW
    more_eos = judge_metric(EOS, RateSample(200, 200, 180, 200), DEFAULT, 100, 0.98)
    assert more_eos.outcome == GOOD


def test_a_critical_rate_passes_a_canary_step_only_when_bounded_within_its_limit():
    # bench-rollout's miss (cb88277): a copy erring on 5% of live requests was promoted from about 40 answers an arm, where
    # 2 errors against none are not significant (Fisher p=0.25) and Kayenta's rule calls that a pass.
    few = judge_metric(ERRORS, RateSample(2, 40, 0, 40), DEFAULT, 20, 0.98)
    assert few.outcome == NODATA and few.critical, few
    assert few.measured["worse_by_upper"] > 0.1 and "not within 0.01" in few.reason and "about 418 an arm" in few.reason, few
    # None in 40 either: nothing shows there is no excess of a point.
    assert judge_metric(ERRORS, RateSample(0, 40, 0, 40), DEFAULT, 20, 0.98).outcome == NODATA
    # Where the policy allows 10 points, 40 clean answers an arm bound it; 5% errors in 400 an arm are bounded against 3
    # points no more, and significant beyond 1 they fail.
    ten = LiveMetricPolicy(max_rate_increase=0.1)
    assert judge_metric(ERRORS, RateSample(0, 40, 0, 40), ten, 20, 0.98).outcome == GOOD
    three = LiveMetricPolicy(max_rate_increase=0.03)
    assert judge_metric(ERRORS, RateSample(20, 400, 0, 400), three, 20, 0.98).outcome == HIGH
    assert judge_metric(ERRORS, RateSample(2, 400, 0, 400), three, 20, 0.98).outcome == GOOD
    # At a shadow step the candidate's answers reach no caller: a significant excess still fails there, and no excess passes.
    shadow = judge_metric(ERRORS, RateSample(0, 40, 0, 40), DEFAULT, 20, 0.98, answers_callers=False)
    assert shadow.outcome == GOOD and "worse by at most" in shadow.reason, shadow
    assert judge_metric(ERRORS, RateSample(10, 60, 0, 200), DEFAULT, 20, 0.98, answers_callers=False).outcome == HIGH
    # A rate that is not critical keeps Kayenta's rule: no significant difference passes.
    assert judge_metric(EOS, RateSample(38, 40, 39, 40), DEFAULT, 20, 0.98).outcome == GOOD


def test_agreement_and_paired_shifts():
    assert judge_metric(AGREE, AgreementSample(150, 200), DEFAULT, 100, 0.98).outcome == LOW
    assert judge_metric(AGREE, AgreementSample(196, 200), DEFAULT, 100, 0.98).outcome == GOOD
    twice_as_long = Binned.of(RNG.normal(1.0, 0.2, 300))  # log2(candidate / production tokens) ~ 1
    j = judge_metric(LENGTH, PairedSample(twice_as_long), DEFAULT, 100, 0.98)
    assert j.outcome == HIGH and j.thresholds["max_shift"] == 0.5  # the metric's own default
    assert judge_metric(LENGTH, PairedSample(Binned.of(RNG.normal(0, 0.2, 300))), DEFAULT, 100, 0.98).outcome == GOOD


def test_a_sample_of_the_wrong_kind_is_refused():
    with pytest.raises(TypeError, match="RateSample"):
        judge_metric(ERRORS, AgreementSample(1, 2), DEFAULT, 10, 0.98)


def rollout(**extra) -> RolloutPolicy:
    raw = {"steps": [{"shadow": 0.2, "for": "30s"}, {"canary": 0.1, "for": "1m"}, "promote"], **extra}
    return RolloutPolicy.model_validate(raw)


def test_the_step_outcome():
    policy = rollout()
    good = judge_metric(LATENCY, ShiftSample(latency(40, 400), latency(40, 400)), DEFAULT, 100, 0.98)
    errors = judge_metric(ERRORS, RateSample(10, 200, 0, 200), DEFAULT, 100, 0.98)
    slow = judge_metric(LATENCY, ShiftSample(latency(60, 400), latency(40, 400)), DEFAULT, 100, 0.98)
    few = judge_metric(LATENCY, ShiftSample(latency(40, 5), latency(40, 400)), DEFAULT, 100, 0.98)
    assert judge_step([good], policy).outcome == PASS
    critical = judge_step([good, errors, few], policy)
    assert critical.outcome == FAIL and "critical metric error_rate" in critical.reasons[0]
    assert judge_step([good, few], policy).outcome == INCONCLUSIVE
    assert judge_step([], policy).outcome == INCONCLUSIVE
    # Non-critical failures weigh on the score: 1 of 2 passing is 50, below the marginal 75.
    assert judge_step([good, slow], policy).outcome == FAIL
    marginal = rollout(pass_score=95, marginal_score=40)
    assert judge_step([good, slow], marginal).outcome == INCONCLUSIVE
    assert judge_step([good, slow], rollout(pass_score=50, marginal_score=40)).outcome == PASS


def test_rollout_steps_from_yaml_and_what_is_refused():
    policy = rollout(min_samples=50)
    assert [s.label() for s in policy.steps] == ["shadow 0.2 for 30 s", "canary 0.1 for 60 s", "promote"]
    assert duration_seconds("1h") == 3600 and duration_seconds("250ms") == 0.25
    longer = RolloutPolicy.model_validate({"steps": [{"canary": 0.1, "for": "1m", "max_for": "1h"}, "promote"]}).steps[0]
    assert (longer.seconds, longer.max_seconds, longer.label()) == (60, 3600, "canary 0.1 for 60 s (up to 3600 s for samples)")
    for steps, message in (
        ([{"canary": 0.1, "for": "1m"}], "at least 2"),
        ([{"canary": 0.1, "for": "1m"}, {"canary": 0.2, "for": "1m"}], "only the last, is 'promote'"),
        (["promote", {"canary": 0.1, "for": "1m"}, "promote"], "only the last"),
        ([{"canary": 0.1}, "promote"], "needs 'for'"),
        ([{"canary": 0.1, "for": "10 minutes"}, "promote"], "not a duration"),
        ([{"canary": 1.0, "for": "1m"}, "promote"], "no traffic to be compared"),
        ([{"canary": 0.1, "shadow": 0.1, "for": "1m"}, "promote"], "one of shadow"),
        ([{"canary": 0.1, "for": "1m", "wait": 3}, "promote"], "wait"),
        ([{"canary": 0.1, "for": "1m", "max_for": "30s"}, "promote"], "cannot be shorter"),
        ([{"canary": 0.1, "for": "1m", "max_for": "an hour"}, "promote"], "not a duration"),
        ([{"canary": 0.1, "for": "1m", "max_seconds": 30}, "promote"], "written max_for"),
        ([{"canary": 0.1, "for": "1m", "seconds": 5}, "promote"], "written for"),
    ):
        with pytest.raises(ValueError, match=message):
            RolloutPolicy.model_validate({"steps": steps})
    with pytest.raises(ValueError, match="marginal_score"):
        rollout(marginal_score=99)
    assert Policy().rollout is None  # no section: promoted when the gates pass, as before
    assert Policy.model_validate({"rollout": {"steps": [{"shadow": 0.5, "for": "5s"}, "promote"]}}).rollout.steps[0].share == 0.5


def test_a_rollout_section_is_held_against_its_tasks_metrics():
    refuse_foreign_rollout(CLASSIFICATION, rollout(metrics={"latency_ms": {"max_tail_ratio": 1.5}}), "the policy")
    with pytest.raises(ModelcdError, match="'ttft_ms', which is not a live metric of classification models"):
        refuse_foreign_rollout(CLASSIFICATION, rollout(metrics={"ttft_ms": {}}), "the policy")
    with pytest.raises(ModelcdError, match="error_rate sets max_tail_ratio, which a rate metric does not have"):
        refuse_foreign_rollout(CAUSAL_LM, rollout(metrics={"error_rate": {"max_tail_ratio": 1.5}}), "the policy")
    bad_step = RolloutPolicy.model_validate({"steps": [{"canary": 0.1, "for": "1m", "metrics": ["latency"]}, "promote"]})
    with pytest.raises(ModelcdError, match="step 1 \\(canary 0.1 for 60 s\\) names 'latency'"):
        refuse_foreign_rollout(CLASSIFICATION, bad_step, "the policy")
    canary = [m.name for m, _ in step_metrics(CAUSAL_LM, rollout(), rollout().steps[1])]
    assert canary == [
        "ttft_ms",
        "tpot_ms",
        "answer_tokens",
        "cost_per_request_usd",
        "cost_per_1m_tokens_usd",
        "error_rate",
        "nan_rate",
        "eos_share",
    ]
    shadow = [m.name for m, _ in step_metrics(CAUSAL_LM, rollout(), rollout().steps[0])]
    # The paired ones only where there are pairs; cost and the EOS share only where each arm answers requests of its own
    # (at a shadow step EOS is compared per pair, eos_kept).
    unpaired = [m for m in canary if not m.startswith("cost_") and m != "eos_share"]
    assert shadow == [*unpaired, "eos_kept", "first_token_agreement", "length_ratio"]


def cost(usd: float, n: int):
    """Costs per request, spread as a live load's concurrency spreads them."""
    return Binned.of(usd * RNG.lognormal(0.0, 0.3, n))


@pytest.mark.parametrize("task", [CLASSIFICATION, CAUSAL_LM])
def test_a_candidate_whose_requests_cost_more_is_high_at_its_canary_step_and_an_equal_one_passes(task):
    (live_cost,) = [m for m in declaration_of(task).live_metrics if m.name == "cost_per_request_usd"]
    assert live_cost.source == ("modelcd_request_cost_usd",) and live_cost.arms == ("canary",)
    dearer = judge_metric(live_cost, ShiftSample(cost(2e-6, 400), cost(1e-6, 400)), DEFAULT, 100, 0.98)
    assert dearer.outcome == HIGH and dearer.measured["mean_ratio"] == pytest.approx(2.0, rel=0.1)
    # 15% dearer: significant at 400 a side, but under the cost's effect-size floor (1.25), which load moves it by.
    near = judge_metric(live_cost, ShiftSample(cost(1.15e-6, 400), cost(1e-6, 400)), DEFAULT, 100, 0.98)
    assert near.outcome == GOOD and near.thresholds["max_mean_ratio"] == 1.25
    assert judge_metric(live_cost, ShiftSample(cost(1e-6, 400), cost(1e-6, 400)), DEFAULT, 100, 0.98).outcome == GOOD


def test_a_copy_that_stops_ending_its_turn_fails_eos_kept_and_an_identical_one_passes():
    (eos_kept,) = [m for m in declaration_of(CAUSAL_LM).live_metrics if m.name == "eos_kept"]
    assert eos_kept.arms == ("shadow",) and eos_kept.kind == "agreement"
    never = judge_metric(eos_kept, AgreementSample(0, 120), DEFAULT, 100, 0.98)
    assert never.outcome == LOW and never.thresholds["min_share"] == 0.9
    assert judge_metric(eos_kept, AgreementSample(120, 120), DEFAULT, 100, 0.98).outcome == GOOD
    # The unpaired share CI saw at a shadow step for a byte-identical copy, 120/132 against 539/561, would have failed.
    (eos_share,) = [m for m in declaration_of(CAUSAL_LM).live_metrics if m.name == "eos_share"]
    assert eos_share.arms == ("canary",)
    assert judge_metric(eos_share, RateSample(120, 132, 539, 561), DEFAULT, 100, 0.98).outcome == LOW
