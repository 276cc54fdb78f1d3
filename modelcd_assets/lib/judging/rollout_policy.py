"""The policy's `rollout:` section: the steps a version takes on live traffic before it is production, and how each is judged.

    rollout:
      steps:
        - shadow: 0.2         # a copy of 20% of requests goes to the candidate; its answers are never returned
          for: 10m
        - canary: 0.05        # 5% of callers (sticky per caller) are answered by the candidate
          for: 10m
          max_for: 1h         # without a verdict for want of samples at 10m, it goes on gathering them up to 1h
          min_samples: 200
        - canary: 0.25
          for: 20m
          metrics: [ttft_ms, error_rate]
        - promote
      metrics:
        ttft_ms: {critical: true, max_tail_ratio: 1.3}

Without the section a version that passes its offline gates becomes production at once, as it always has.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)$")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
SHADOW, CANARY, PROMOTE = "shadow", "canary", "promote"

# The threshold each kind of live metric is judged by (lib/tasks/names.LIVE_KINDS), with its default.
KIND_THRESHOLDS = {
    "shift": {"max_mean_ratio": 1.1, "max_tail_ratio": 1.2},
    "rate": {"max_rate_increase": 0.01},
    "agreement": {"min_share": 0.9},
    "paired_shift": {"max_shift": 0.1},
}


def duration_seconds(text: str | float | int) -> float:
    """'10m' -> 600.0; a bare number is seconds."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    match = DURATION.match(str(text).strip())
    if not match:
        raise ValueError(f"{text!r} is not a duration: write a number and a unit, ms, s, m or h (30s, 10m, 1h)")
    return float(match.group(1)) * _SECONDS[match.group(2)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class LiveMetricPolicy(_Strict):
    """How one live metric is judged; a threshold left out takes its kind's default (KIND_THRESHOLDS)."""

    critical: bool | None = Field(None, description="A failure aborts the rollout at once, whatever the score; unset: the task's default.")
    weight: float = Field(1.0, gt=0, description="The metric's weight in the step's score.")
    max_mean_ratio: float | None = Field(
        None, gt=1, description="shift: the effect-size floor; a significant shift fails only when the mean ratio is beyond it."
    )
    max_tail_ratio: float | None = Field(None, gt=1, description="shift: how far the candidate's p99 may be above production's.")
    max_rate_increase: float | None = Field(
        None, ge=0, le=1, description="rate: how far the candidate's rate may be above production's, absolute (0.01: one point)."
    )
    min_share: float | None = Field(None, gt=0, le=1, description="agreement: the share of shadowed pairs that must agree.")
    max_shift: float | None = Field(None, gt=0, description="paired_shift: how far the median per-pair difference may move the bad way.")

    def threshold(self, metric, name: str) -> float:
        """This metric's threshold `name`: the policy's, else the task's default for the metric (LiveMetric.defaults), else its kind's."""
        value = getattr(self, name)
        if value is not None:
            return value
        return dict(metric.defaults).get(name, KIND_THRESHOLDS[metric.kind][name])

    def foreign(self, kind: str) -> list[str]:
        """The thresholds set here that a metric of this kind does not have."""
        mine = KIND_THRESHOLDS[kind]
        return [name for names in KIND_THRESHOLDS.values() for name in names if name not in mine and getattr(self, name) is not None]


class RolloutStep(_Strict):
    """One step: shadow or canary a share of requests for a while, or promote."""

    kind: str = Field(pattern="^(shadow|canary|promote)$")
    share: float = Field(0.0, ge=0, le=1)
    seconds: float = Field(0.0, ge=0)
    max_seconds: float | None = Field(
        None,
        description="max_for: how long the step may go on past `for` while a metric has too few samples for a verdict "
        "(unset: it pauses at its end); at max_for without a verdict it pauses.",
    )
    min_samples: int | None = Field(None, ge=10, description="Fewest requests per arm (or shadowed pairs) a verdict needs.")
    metrics: tuple[str, ...] | None = Field(None, description="The metrics judged at this step; unset: all of the task's.")

    @model_validator(mode="before")
    @classmethod
    def _from_yaml(cls, raw: Any) -> Any:
        if raw == PROMOTE:
            return {"kind": PROMOTE}
        if not isinstance(raw, dict) or "kind" in raw:
            return raw
        kinds = [k for k in (SHADOW, CANARY) if k in raw]
        if len(kinds) != 1:
            raise ValueError(f"a step is 'promote' or a mapping with one of shadow: SHARE or canary: SHARE, not {raw!r}")
        for written, field_name in (("for", "seconds"), ("max_for", "max_seconds")):
            if field_name in raw:
                raise ValueError(f"a step's length is written {written}: a duration (e.g. {written}: 10m), not {field_name}: {raw!r}")
        out = {k: v for k, v in raw.items() if k not in (SHADOW, CANARY, "for", "max_for")}
        if "for" not in raw:
            raise ValueError(f"the {kinds[0]} step {raw!r} needs 'for': how long it runs before it is judged (e.g. for: 10m)")
        if "max_for" in raw:
            out["max_seconds"] = duration_seconds(raw["max_for"])
        return {"kind": kinds[0], "share": raw[kinds[0]], "seconds": duration_seconds(raw["for"]), **out}

    @model_validator(mode="after")
    def _shape(self) -> "RolloutStep":
        if self.kind == PROMOTE:
            if self.share or self.seconds or self.max_seconds is not None or self.min_samples is not None or self.metrics is not None:
                raise ValueError("'promote' takes nothing: it is the last step, where the alias moves")
            return self
        if not 0 < self.share <= 1:
            raise ValueError(f"a {self.kind} step's share must be above 0 and at most 1, not {self.share}")
        if self.seconds <= 0:
            raise ValueError(f"a {self.kind} step must run for some time, not {self.seconds} s")
        if self.max_seconds is not None and self.max_seconds < self.seconds:
            raise ValueError(
                f"a {self.kind} step's max_for ({self.max_seconds:g} s) is how long it may go on past its for"
                f" ({self.seconds:g} s) to gather samples: it cannot be shorter"
            )
        if self.kind == CANARY and self.share == 1:
            raise ValueError("a canary of share 1 leaves production no traffic to be compared with; promote instead")
        return self

    def label(self) -> str:
        if self.kind == PROMOTE:
            return PROMOTE
        longer = f" (up to {self.max_seconds:g} s for samples)" if self.max_seconds and self.max_seconds > self.seconds else ""
        return f"{self.kind} {self.share:g} for {self.seconds:g} s{longer}"


class RolloutPolicy(_Strict):
    """How a version that passed its offline gates reaches production: the steps on live traffic and the judge's settings."""

    steps: tuple[RolloutStep, ...] = Field(min_length=2, description="Shadow and canary steps, then 'promote'.")
    min_samples: int = Field(100, ge=10, description="Fewest requests per arm (or shadowed pairs) a step's verdict needs, by default.")
    confidence: float = Field(0.98, gt=0.5, lt=1, description="Confidence of every test (Kayenta's judge uses 0.98).")
    pass_score: float = Field(95.0, ge=0, le=100, description="A step passes when its weighted share of passing metrics reaches this.")
    marginal_score: float = Field(
        75.0, ge=0, le=100, description="Below pass_score and at least this: inconclusive (the rollout pauses); below it: the step fails."
    )
    metrics: dict[str, LiveMetricPolicy] = Field(default_factory=dict, description="Per metric: its thresholds, weight and criticality.")

    @field_validator("steps", mode="before")
    @classmethod
    def _steps(cls, raw: Any) -> Any:
        if not isinstance(raw, (list, tuple)):
            raise ValueError("steps is a list: shadow and canary steps, then promote")
        return raw

    @model_validator(mode="after")
    def _order(self) -> "RolloutPolicy":
        kinds = [s.kind for s in self.steps]
        if kinds[-1] != PROMOTE or kinds.count(PROMOTE) != 1:
            raise ValueError(f"the last step, and only the last, is 'promote' (the steps are {', '.join(kinds)})")
        if self.marginal_score > self.pass_score:
            raise ValueError(f"marginal_score ({self.marginal_score}) must not be above pass_score ({self.pass_score})")
        return self

    def judged_steps(self) -> tuple[RolloutStep, ...]:
        return self.steps[:-1]

    def metric(self, name: str) -> LiveMetricPolicy:
        return self.metrics.get(name) or LiveMetricPolicy()
