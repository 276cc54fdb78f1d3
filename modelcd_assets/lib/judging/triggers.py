"""Feedback triggers: a metric of a model's live traffic, held past a threshold for a while, calls for an action.

    triggers:
      - metric: p99_latency_ms      # a metric of the task's SLO (slo_queries), slo, or promql: '...$model...$version...'
        above: 45
        for: 2m                     # and/or times: N, readings in a row
        action: rollback            # rollback, abort_rollout, recalibrate, regate or run_job (with job: NAME)

The slo: section is one trigger of every policy (Policy.feedback_triggers): `slo > 0` for slo.consecutive_failures
readings in a row, rollback; its readings are kept and go with the rollback it asks for.

A trigger reads production's version, or, for abort_rollout, the version a rollout is taking live. A value that cannot
be read (no series, too few requests) is no data: it neither starts nor resets the time the condition has held. A
trigger fires once per version while its condition holds; when the condition stops holding, it may fire again later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.slo import FAIL, PASS, SloPolicy, evaluate_slo, query, slo_queries
from modelcd_assets.lib.judging.trigger_policy import SLO_METRIC, TriggerPolicy


def trigger_query(trigger: TriggerPolicy, model: str, version: str, task: str) -> tuple[str, str | None]:
    """The PromQL a trigger reads for one version, and the one counting its requests (None for a promql trigger)."""
    if trigger.promql is not None:
        return trigger.promql.replace("$model", model).replace("$version", version), None
    queries = slo_queries(model, version, trigger.window, task)
    if trigger.metric not in queries or trigger.metric == "samples":
        known = ", ".join(q for q in queries if q != "samples")
        raise ModelcdError(f"trigger {trigger.label!r} reads {trigger.metric!r}, which is not a metric of {task} models ({known})")
    return queries[trigger.metric], queries["samples"]


@dataclass(frozen=True)
class Reading:
    """One reading of a trigger: its value (None: no data), the PromQL it came from, and, for slo, the evaluation judged."""

    value: float | None
    promql: str
    evaluation: dict | None = None

    @property
    def shown(self) -> str:
        if self.evaluation is not None and self.evaluation["reasons"]:
            return f"{self.evaluation['outcome']} ({'; '.join(self.evaluation['reasons'])})"
        if self.evaluation is not None:
            return self.evaluation["outcome"]
        return "no data" if self.value is None else f"{self.value:.4g}"


def read_trigger(url: str, trigger: TriggerPolicy, model: str, version: str, task: str, slo: SloPolicy) -> Reading:
    """The trigger's reading for version; PrometheusUnavailable when Prometheus cannot answer."""
    if trigger.metric == SLO_METRIC:
        verdict = evaluate_slo(url, model, version, slo, task)
        broken = float(len(verdict.reasons)) if verdict.outcome == FAIL else 0.0 if verdict.outcome == PASS else None
        evaluation = {"outcome": verdict.outcome, "values": verdict.values, "reasons": verdict.reasons, "queries": verdict.queries}
        return Reading(broken, "; ".join(f"{name}: {promql}" for name, promql in verdict.queries.items()), evaluation)
    promql, samples = trigger_query(trigger, model, version, task)
    if samples is not None and (query(url, samples) or 0.0) < trigger.min_samples:
        return Reading(None, promql)
    return Reading(query(url, promql), promql)


@dataclass(frozen=True)
class Held:
    """Where a trigger stands: the version it watches, since when its condition has held, in how many readings in a row (and
    the last `times` of them that carried an evaluation), and whether it fired for that."""

    version: str
    since: float | None = None
    fired: bool = False
    count: int = 0
    evaluations: tuple = field(default=(), compare=False)

    @classmethod
    def of(cls, raw: dict | None, version: str) -> "Held":
        if not raw or raw.get("version") != version:
            return cls(version)
        return cls(version, raw.get("since"), bool(raw.get("fired")), int(raw.get("count", 0)), tuple(raw.get("evaluations", ())))

    def as_dict(self) -> dict:
        return {
            "version": self.version,
            "since": self.since,
            "fired": self.fired,
            "count": self.count,
            "evaluations": list(self.evaluations),
        }


def step(held: Held, trigger: TriggerPolicy, reading: Reading, now: float) -> tuple[Held, bool]:
    """The trigger's standing after one reading, and whether it fires now."""
    if reading.value is None:  # no data: the clock and the count neither start nor stop
        return held, False
    if not trigger.holds(reading.value):
        return Held(held.version), False
    since = held.since if held.since is not None else now
    count = held.count + 1
    evaluations = (*held.evaluations, reading.evaluation)[-trigger.times :] if reading.evaluation is not None else held.evaluations
    fire = not held.fired and count >= trigger.times and now - since >= trigger.hold_seconds
    return Held(held.version, since, held.fired or fire, count, evaluations), fire


def firing_name(trigger: TriggerPolicy, index: int) -> str:
    """A trigger's key in the sensor's cursor and in run keys: its position and label, stable while the policy is."""
    return f"{index}:" + re.sub(r"[^A-Za-z0-9_.-]+", "_", trigger.label)[:80]


def refuse_foreign_triggers(task: str, triggers: list[TriggerPolicy], source: str) -> None:
    """A trigger that reads a metric its model's task does not measure is refused, naming it."""
    for trigger in triggers:
        if trigger.metric == SLO_METRIC:  # every task has an SLO
            continue
        try:
            trigger_query(trigger, "model", "0", task)
        except ModelcdError as e:
            raise ModelcdError(f"{source}: {e}") from e
