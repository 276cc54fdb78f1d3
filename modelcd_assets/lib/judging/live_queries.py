"""What a rollout step's live metrics read from Prometheus: one query per metric and version, so that the candidate's and
production's samples are never mixed in one query, each summed over every replica that serves the model.

A histogram arrives as its buckets' increase over the step's window (lib/judging/live_stats.Binned.from_buckets), a rate
as its two counters' increase. The PromQL of every read goes on the step's report beside what it returned.
"""

from __future__ import annotations

import math

from modelcd_assets.lib.judging.live_analysis import (
    AgreementSample,
    PairedSample,
    RateSample,
    ShiftSample,
    StepAnalysis,
    judge_metric,
    judge_step,
    step_metrics,
)
from modelcd_assets.lib.judging.live_stats import Binned
from modelcd_assets.lib.judging.rollout_policy import RolloutPolicy, RolloutStep
from modelcd_assets.lib.judging.slo import query, query_vector
from modelcd_assets.lib.tasks.names import LiveMetric

EMPTY = Binned.of([])


def _selector(model: str, version: str) -> str:
    return f'model="{model}",version="{version}"'


def histogram_query(histogram: str, model: str, version: str, window: str) -> str:
    return f"sum by (le) (increase({histogram}_bucket{{{_selector(model, version)}}}[{window}]))"


def counter_query(counter: str, model: str, version: str, window: str) -> str:
    # "or vector(0)": a counter that never moved may have no series at all, which is zero, not "no data".
    return f"sum(increase({counter}{{{_selector(model, version)}}}[{window}])) or vector(0)"


def read_histogram(url: str, promql: str) -> Binned:
    """A histogram's buckets as a Binned sample; no series is an empty sample (no data, judged so)."""
    rows = query_vector(url, promql)
    if not rows:
        return EMPTY
    buckets = sorted((float(labels["le"]), value) for labels, value in rows if "le" in labels)
    bounds, cumulative = [b for b, _ in buckets], [0.0 if math.isnan(v) else v for _, v in buckets]
    return Binned.from_buckets(bounds, cumulative)


def _count(url: str, promql: str) -> int:
    value = query(url, promql)
    return 0 if value is None else max(0, round(value))


def window_of(seconds: float) -> str:
    """A PromQL range covering a step's time so far, whole seconds, at least a minute's scrape or two."""
    return f"{max(int(math.ceil(seconds)), 15)}s"


def read_live(url: str, metric: LiveMetric, model: str, candidate: str, production: str, window: str):
    """metric's sample for the candidate against production over window, and the PromQL it was read with."""
    if metric.kind == "shift":
        (histogram,) = metric.source
        queries = {
            "candidate": histogram_query(histogram, model, candidate, window),
            "production": histogram_query(histogram, model, production, window),
        }
        return ShiftSample(read_histogram(url, queries["candidate"]), read_histogram(url, queries["production"])), queries
    if metric.kind == "rate":
        events, trials = metric.source
        queries = {
            "candidate_events": counter_query(events, model, candidate, window),
            "candidate_trials": counter_query(trials, model, candidate, window),
            "production_events": counter_query(events, model, production, window),
            "production_trials": counter_query(trials, model, production, window),
        }
        counts = {name: _count(url, promql) for name, promql in queries.items()}
        # Counters scraped at different instants can disagree by a request: never more events than trials.
        return (
            RateSample(
                min(counts["candidate_events"], counts["candidate_trials"]),
                counts["candidate_trials"],
                min(counts["production_events"], counts["production_trials"]),
                counts["production_trials"],
            ),
            queries,
        )
    if metric.kind == "agreement":
        agreed, pairs = metric.source
        queries = {"agreed": counter_query(agreed, model, candidate, window), "pairs": counter_query(pairs, model, candidate, window)}
        n = _count(url, queries["pairs"])
        return AgreementSample(min(_count(url, queries["agreed"]), n), n), queries
    (histogram,) = metric.source
    queries = {"differences": histogram_query(histogram, model, candidate, window)}
    return PairedSample(read_histogram(url, queries["differences"])), queries


def analyse_step(
    url: str, task: str, model: str, candidate: str, production: str, policy: RolloutPolicy, step: RolloutStep, seconds: float
) -> StepAnalysis:
    """Every live metric of a step, read over the step's time so far and judged; raises PrometheusUnavailable when
    Prometheus cannot answer (nothing may be decided on what it would have said)."""
    window = window_of(seconds)
    need = step.min_samples or policy.min_samples
    judgements = []
    for metric, metric_policy in step_metrics(task, policy, step):
        sample, queries = read_live(url, metric, model, candidate, production, window)
        judgements.append(judge_metric(metric, sample, metric_policy, need, policy.confidence, queries))
    return judge_step(judgements, policy)
