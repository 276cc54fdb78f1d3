"""What a rollout step's live metrics read from Prometheus: one query per metric and version, so that the candidate's and
production's samples are never mixed in one query, each summed over every replica that serves the model.

Each read is the raw samples of a counter, or of a histogram's buckets, since a little before the step began, and what
each grew by during the step is counted exactly from them (lib/judging/live_increase.py): whole requests, a histogram
cumulative in `le` (lib/judging/live_stats.Binned.from_buckets), no request of the step's first scrape lost. The PromQL
of every read goes on the step's report beside what it returned.
"""

from __future__ import annotations

import math
import time

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
from modelcd_assets.lib.judging.live_increase import CREATED_SUFFIX, Series, window_growth
from modelcd_assets.lib.judging.live_stats import Binned
from modelcd_assets.lib.judging.rollout_policy import CANARY, RolloutPolicy, RolloutStep
from modelcd_assets.lib.judging.slo import query_samples
from modelcd_assets.lib.tasks.names import LiveMetric

EMPTY = Binned.of([])
# How far before a step's start its reads reach for the last scrape before it: Prometheus's default lookback delta, the
# longest a scrape may be older than an instant and still give its value.
LOOKBACK_SECONDS = 300


def _samples_query(names: tuple[str, ...], model: str, version: str, seconds: float) -> str:
    reach = int(math.ceil(seconds)) + LOOKBACK_SECONDS
    return f'{{__name__=~"{"|".join(names)}",model="{model}",version="{version}"}}[{reach}s]'


def histogram_query(histogram: str, model: str, version: str, seconds: float) -> str:
    """A histogram's buckets and its `_created` time, over the step's seconds and the lookback before them."""
    return _samples_query((f"{histogram}_bucket", f"{histogram}{CREATED_SUFFIX}"), model, version, seconds)


def counter_query(counter: str, model: str, version: str, seconds: float) -> str:
    """A counter and its `_created` time, over the step's seconds and the lookback before them."""
    return _samples_query((counter, counter.removesuffix("_total") + CREATED_SUFFIX), model, version, seconds)


def _growth(url: str, promql: str, at: float, start: float) -> dict[float, float]:
    return window_growth([Series(labels, samples) for labels, samples in query_samples(url, promql, at)], start)


def read_histogram(url: str, promql: str, at: float, start: float) -> Binned:
    """What a histogram's buckets grew by after start, as a Binned sample; no series is an empty sample (no data, judged
    so)."""
    growth = _growth(url, promql, at, start)
    if not growth:
        return EMPTY
    bounds = sorted(growth)
    return Binned.from_buckets(bounds, [growth[b] for b in bounds])


def _count(url: str, promql: str, at: float, start: float) -> int:
    """What a counter grew by after start; a counter with no series never moved (zero, not "no data")."""
    return max(0, round(sum(_growth(url, promql, at, start).values())))


def read_live(url: str, metric: LiveMetric, model: str, candidate: str, production: str, at: float, seconds: float):
    """metric's sample for the candidate against production over the seconds before `at`, and the PromQL it was read with."""
    start = at - seconds
    if metric.kind == "shift":
        (histogram,) = metric.source
        queries = {
            "candidate": histogram_query(histogram, model, candidate, seconds),
            "production": histogram_query(histogram, model, production, seconds),
        }
        return ShiftSample(
            read_histogram(url, queries["candidate"], at, start), read_histogram(url, queries["production"], at, start)
        ), queries
    if metric.kind == "rate":
        events, trials = metric.source
        queries = {
            "candidate_events": counter_query(events, model, candidate, seconds),
            "candidate_trials": counter_query(trials, model, candidate, seconds),
            "production_events": counter_query(events, model, production, seconds),
            "production_trials": counter_query(trials, model, production, seconds),
        }
        counts = {name: _count(url, promql, at, start) for name, promql in queries.items()}
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
        queries = {"agreed": counter_query(agreed, model, candidate, seconds), "pairs": counter_query(pairs, model, candidate, seconds)}
        n = _count(url, queries["pairs"], at, start)
        return AgreementSample(min(_count(url, queries["agreed"], at, start), n), n), queries
    (histogram,) = metric.source
    queries = {"differences": histogram_query(histogram, model, candidate, seconds)}
    return PairedSample(read_histogram(url, queries["differences"], at, start)), queries


def analyse_step(
    url: str, task: str, model: str, candidate: str, production: str, policy: RolloutPolicy, step: RolloutStep, seconds: float
) -> StepAnalysis:
    """Every live metric of a step, read over its time so far (seconds) and judged; raises PrometheusUnavailable when
    Prometheus cannot answer (nothing may be decided on what it would have said)."""
    at = time.time()
    need = step.min_samples or policy.min_samples
    judgements = []
    for metric, metric_policy in step_metrics(task, policy, step):
        sample, queries = read_live(url, metric, model, candidate, production, at, seconds)
        judgements.append(
            judge_metric(metric, sample, metric_policy, need, policy.confidence, queries, answers_callers=step.kind == CANARY)
        )
    return judge_step(judgements, policy)
