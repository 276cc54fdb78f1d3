"""A rollout step's verdict: each live metric of the candidate judged against production's, then the step as a whole.

Per metric (lib/judging/live_stats.py does the arithmetic):
- too few samples in either arm, or none, is `nodata`: a low-traffic canary is never judged good on no evidence;
- shift: Kayenta's rule (a Mann-Whitney CI of the Hodges-Lehmann shift beyond 0.25 x its estimate, and the mean ratio beyond
  the effect-size floor), and, where higher is worse, the p99 ratio's bootstrap CI beyond max_tail_ratio;
- rate: Fisher's exact test in the bad direction, and the rates apart by more than max_rate_increase; a critical rate at a
  step where the candidate answers callers (canary) passes only when the confidence bound of its increase is within
  max_rate_increase, and has no verdict otherwise: 5% errors among 40 answers an arm are not significant, and a test that
  finds no excess has not shown there is none (a copy erring on 5% of live requests was promoted so);
- agreement: an exact binomial test of the agreeing share against min_share;
- paired_shift: the median per-pair difference's CI beyond max_shift the bad way.
The step fails at once when a critical metric fails; otherwise any `nodata` makes it inconclusive (the rollout pauses), and
the weighted share of passing metrics is held against pass_score and marginal_score, as Kayenta's score is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.live_stats import (
    Binned,
    agreement_test,
    clean_trials_needed,
    increase_bound,
    rate_test,
    shift_test,
    tail_ratio,
)
from modelcd_assets.lib.judging.rollout_policy import KIND_THRESHOLDS, LiveMetricPolicy, RolloutPolicy, RolloutStep
from modelcd_assets.lib.judging.stats import median_ci, median_ci_min_n
from modelcd_assets.lib.tasks.names import LiveMetric, declaration_of

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"  # a step's outcome
GOOD, HIGH, LOW, NODATA = "pass", "high", "low", "nodata"  # a metric's outcome, as Kayenta names them
HL_TOLERANCE = 0.25  # Kayenta's: a shift counts only when its CI clears a quarter of the Hodges-Lehmann estimate


@dataclass(frozen=True)
class ShiftSample:
    candidate: Binned
    baseline: Binned


@dataclass(frozen=True)
class RateSample:
    candidate_events: int
    candidate_trials: int
    baseline_events: int
    baseline_trials: int


@dataclass(frozen=True)
class AgreementSample:
    agreed: int
    pairs: int


@dataclass(frozen=True)
class PairedSample:
    differences: Binned  # candidate minus production, one per shadowed pair


SAMPLE_KINDS = {"shift": ShiftSample, "rate": RateSample, "agreement": AgreementSample, "paired_shift": PairedSample}


@dataclass(frozen=True)
class MetricJudgement:
    """One live metric's outcome, with every number it was decided on."""

    metric: str
    kind: str
    outcome: str
    critical: bool
    weight: float
    samples: dict[str, int]  # per arm (candidate, production) or pairs
    measured: dict[str, float]
    thresholds: dict[str, float]
    reason: str
    queries: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.outcome in (HIGH, LOW)

    def as_dict(self) -> dict:
        return {
            "metric": self.metric,
            "kind": self.kind,
            "outcome": self.outcome,
            "critical": self.critical,
            "weight": self.weight,
            "samples": self.samples,
            "measured": {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in self.measured.items()},
            "thresholds": self.thresholds,
            "reason": self.reason,
            "queries": self.queries,
        }


@dataclass(frozen=True)
class StepAnalysis:
    outcome: str
    score: float
    reasons: list[str]
    metrics: list[MetricJudgement]

    def as_dict(self) -> dict:
        return {"outcome": self.outcome, "score": self.score, "reasons": self.reasons, "metrics": [m.as_dict() for m in self.metrics]}


def _nodata(metric: LiveMetric, policy: LiveMetricPolicy, samples: dict[str, int], need: int, queries: dict[str, str]) -> MetricJudgement:
    have = ", ".join(f"{n} {arm}" for arm, n in samples.items())
    return MetricJudgement(
        metric.name,
        metric.kind,
        NODATA,
        _critical(metric, policy),
        policy.weight,
        samples,
        {},
        {"min_samples": need},
        f"{have}: fewer than the {need} needed in each",
        queries,
    )


def _critical(metric: LiveMetric, policy: LiveMetricPolicy) -> bool:
    return metric.critical if policy.critical is None else policy.critical


def judge_metric(
    metric: LiveMetric,
    sample,
    policy: LiveMetricPolicy,
    min_samples: int,
    confidence: float,
    queries: dict[str, str] | None = None,
    *,
    answers_callers: bool = True,
) -> MetricJudgement:
    """Classify one live metric from its sample (SAMPLE_KINDS[metric.kind]) as pass, high, low or nodata. answers_callers:
    the candidate answers callers at this step (a canary step), so a critical rate must be bounded to pass."""
    queries = dict(queries or {})
    expected = SAMPLE_KINDS[metric.kind]
    if not isinstance(sample, expected):
        raise TypeError(f"live metric {metric.name} ({metric.kind}) is judged on a {expected.__name__}, not a {type(sample).__name__}")
    alpha = 1 - confidence
    critical, weight = _critical(metric, policy), policy.weight

    def judged(outcome: str, samples, measured, thresholds, reason) -> MetricJudgement:
        return MetricJudgement(metric.name, metric.kind, outcome, critical, weight, samples, measured, thresholds, reason, queries)

    if metric.kind == "shift":
        samples = {"candidate": sample.candidate.n, "production": sample.baseline.n}
        if min(samples.values()) < min_samples:
            return _nodata(metric, policy, samples, min_samples, queries)
        floor, tail_limit = policy.threshold(metric, "max_mean_ratio"), policy.threshold(metric, "max_tail_ratio")
        shift = shift_test(sample.candidate, sample.baseline, confidence)
        tol = HL_TOLERANCE * abs(shift.estimate)
        tail = tail_ratio(sample.candidate, sample.baseline, 0.99, confidence)
        s = metric.scale
        measured = {
            "shift": shift.estimate * s,
            "shift_lower": shift.lower * s,
            "shift_upper": shift.upper * s,
            "p_value": shift.p_value,
            "mean_ratio": shift.mean_ratio,
            "candidate_p99": tail.candidate * s,
            "production_p99": tail.baseline * s,
            "p99_ratio": tail.ratio,
            "p99_ratio_lower": tail.lower,
            "p99_ratio_upper": tail.upper,
        }
        thresholds = {"max_mean_ratio": floor, "max_tail_ratio": tail_limit, "confidence": confidence}
        if metric.higher_is_worse:
            if shift.lower > tol and shift.mean_ratio > floor:
                return judged(
                    HIGH,
                    samples,
                    measured,
                    thresholds,
                    f"higher: shift {shift.estimate * s:+.4g} (CI {shift.lower * s:.4g} to {shift.upper * s:.4g}), mean ratio"
                    f" {shift.mean_ratio:.3f} > {floor:g}",
                )
            if tail.lower > tail_limit:
                return judged(
                    HIGH,
                    samples,
                    measured,
                    thresholds,
                    f"tail: p99 {tail.candidate * s:.4g} against {tail.baseline * s:.4g}, ratio {tail.ratio:.3f} (CI {tail.lower:.3f}"
                    f" to {tail.upper:.3f}) > {tail_limit:g}",
                )
        elif shift.upper < -tol and shift.mean_ratio < 1 / floor:
            return judged(
                LOW,
                samples,
                measured,
                thresholds,
                f"lower: shift {shift.estimate * s:+.4g} (CI {shift.lower * s:.4g} to {shift.upper * s:.4g}), mean ratio"
                f" {shift.mean_ratio:.3f} < {1 / floor:.3f}",
            )
        return judged(GOOD, samples, measured, thresholds, f"mean ratio {shift.mean_ratio:.3f}, p99 ratio {tail.ratio:.3f}")

    if metric.kind == "rate":
        samples = {"candidate": sample.candidate_trials, "production": sample.baseline_trials}
        if min(samples.values()) < min_samples:
            return _nodata(metric, policy, samples, min_samples, queries)
        limit = policy.threshold(metric, "max_rate_increase")
        rates = rate_test(
            sample.candidate_events, sample.candidate_trials, sample.baseline_events, sample.baseline_trials, metric.higher_is_worse
        )
        worse_by = (rates.candidate_rate - rates.baseline_rate) * (1 if metric.higher_is_worse else -1)
        bound = increase_bound(
            sample.candidate_events,
            sample.candidate_trials,
            sample.baseline_events,
            sample.baseline_trials,
            metric.higher_is_worse,
            confidence,
        )
        measured = {
            "candidate_rate": rates.candidate_rate,
            "production_rate": rates.baseline_rate,
            "p_value": rates.p_value,
            "worse_by_upper": bound,
        }
        thresholds = {"max_rate_increase": limit, "alpha": alpha}
        text = (
            f"{sample.candidate_events}/{sample.candidate_trials} against {sample.baseline_events}/{sample.baseline_trials},"
            f" Fisher p={rates.p_value:.3g}"
        )
        if rates.p_value < alpha and worse_by > limit:
            return judged(
                HIGH if metric.higher_is_worse else LOW, samples, measured, thresholds, f"{text}: apart by {worse_by:.4f} > {limit:g}"
            )
        bounded = f"worse by at most {bound:.4f} ({100 * confidence:g}% bound)"
        if critical and answers_callers and bound > limit:
            need = clean_trials_needed(limit, confidence)
            more = f"about {need:.0f} an arm, neither with one, would bound it" if math.isfinite(need) else "no sample bounds it at 0"
            return judged(
                NODATA,
                samples,
                measured,
                thresholds,
                f"{text}: {bounded}, not within {limit:g}; a critical rate passes a canary step only when bounded ({more})",
            )
        return judged(GOOD, samples, measured, thresholds, f"{text}, {bounded}")

    if metric.kind == "agreement":
        samples = {"pairs": sample.pairs}
        if sample.pairs < min_samples:
            return _nodata(metric, policy, samples, min_samples, queries)
        minimum = policy.threshold(metric, "min_share")
        test = agreement_test(sample.agreed, sample.pairs, minimum, confidence)
        measured = {"share": test.share, "share_lower": test.lower, "p_value": test.p_value}
        thresholds = {"min_share": minimum, "alpha": alpha}
        text = f"{sample.agreed}/{sample.pairs} pairs agree ({100 * test.share:.1f}%), p={test.p_value:.3g} against {minimum:g}"
        return judged(LOW if test.p_value < alpha else GOOD, samples, measured, thresholds, text)

    # paired_shift
    samples = {"pairs": sample.differences.n}
    need = max(min_samples, median_ci_min_n(confidence))
    if sample.differences.n < need:
        return _nodata(metric, policy, samples, need, queries)
    limit = policy.threshold(metric, "max_shift")
    median, lower, upper = median_ci(np.repeat(sample.differences.values, sample.differences.counts), confidence)
    s = metric.scale
    measured = {"median": median * s, "median_lower": lower * s, "median_upper": upper * s}
    thresholds = {"max_shift": limit, "confidence": confidence}
    text = f"median difference {median * s:+.4g} (CI {lower * s:.4g} to {upper * s:.4g})"
    if metric.higher_is_worse and lower * s > limit:
        return judged(HIGH, samples, measured, thresholds, f"{text} > {limit:g}")
    if not metric.higher_is_worse and upper * s < -limit:
        return judged(LOW, samples, measured, thresholds, f"{text} < {-limit:g}")
    return judged(GOOD, samples, measured, thresholds, text)


def judge_step(judgements: list[MetricJudgement], policy: RolloutPolicy) -> StepAnalysis:
    """The step's outcome from its metrics: fail on a critical failure; inconclusive on any nodata; else by the score."""
    if not judgements:
        return StepAnalysis(INCONCLUSIVE, 0.0, ["no live metric was judged"], [])
    total = sum(j.weight for j in judgements)
    score = 100.0 * sum(j.weight for j in judgements if j.outcome == GOOD) / total
    critical = [j for j in judgements if j.critical and j.failed]
    if critical:
        return StepAnalysis(FAIL, score, [f"critical metric {j.metric} failed: {j.reason}" for j in critical], judgements)
    nodata = [j for j in judgements if j.outcome == NODATA]
    if nodata:
        return StepAnalysis(INCONCLUSIVE, score, [f"{j.metric}: no verdict, {j.reason}" for j in nodata], judgements)
    failed = [f"{j.metric} failed: {j.reason}" for j in judgements if j.failed]
    if score >= policy.pass_score:
        return StepAnalysis(PASS, score, failed, judgements)
    if score >= policy.marginal_score:
        return StepAnalysis(INCONCLUSIVE, score, [f"score {score:.0f} is marginal (pass at {policy.pass_score:g})", *failed], judgements)
    return StepAnalysis(FAIL, score, [f"score {score:.0f} is below {policy.marginal_score:g}", *failed], judgements)


def step_metrics(task: str, policy: RolloutPolicy, step: RolloutStep) -> list[tuple[LiveMetric, LiveMetricPolicy]]:
    """The live metrics a step of task's rollout judges, each with its policy; arms a metric does not have are left to the others."""
    declared = {m.name: m for m in declaration_of(task).live_metrics}
    names = step.metrics if step.metrics is not None else tuple(declared)
    return [(declared[n], policy.metric(n)) for n in names if step.kind in declared[n].arms]


def refuse_foreign_rollout(task: str, policy: RolloutPolicy, source: str) -> None:
    """A rollout section that names a metric task's models do not have, sets a threshold its metric's kind does not have, or
    leaves a step nothing to judge, is refused, naming it."""
    declared = {m.name: m for m in declaration_of(task).live_metrics}
    if not declared:
        raise ModelcdError(f"{source} has a rollout section, but {task} models declare no live metric to judge a rollout step on")
    for metric in declared.values():
        if foreign := sorted(set(dict(metric.defaults)) - set(KIND_THRESHOLDS[metric.kind])):
            raise ModelcdError(
                f"task {task!r}'s live metric {metric.name} declares defaults for {', '.join(foreign)}, which a {metric.kind} metric"
                f" does not have (it has {', '.join(KIND_THRESHOLDS[metric.kind])})"
            )
    known = ", ".join(declared)
    for name, metric_policy in policy.metrics.items():
        if name not in declared:
            raise ModelcdError(f"{source}: rollout.metrics names {name!r}, which is not a live metric of {task} models ({known})")
        if foreign := metric_policy.foreign(declared[name].kind):
            raise ModelcdError(
                f"{source}: rollout.metrics.{name} sets {', '.join(foreign)}, which a {declared[name].kind} metric does not have"
                f" (it has {', '.join(KIND_THRESHOLDS[declared[name].kind])})"
            )
    for i, step in enumerate(policy.judged_steps(), 1):
        for name in step.metrics or ():
            if name not in declared:
                raise ModelcdError(
                    f"{source}: rollout step {i} ({step.label()}) names {name!r}, not a live metric of {task} models ({known})"
                )
        if not step_metrics(task, policy, step):
            raise ModelcdError(
                f"{source}: rollout step {i} ({step.label()}) would judge no metric: none of {', '.join(step.metrics or declared)}"
                f" is measured at a {step.kind} step"
            )
