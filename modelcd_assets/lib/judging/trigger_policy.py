"""A policy's feedback triggers (`triggers:`): a metric of a model's live traffic, held past a threshold for a while,
and the action it calls for. What a trigger reads and when it fires: lib/judging/triggers.py."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from modelcd_assets.lib.judging.rollout_policy import duration_seconds

ROLLBACK, ABORT_ROLLOUT, RECALIBRATE, REGATE, RUN_JOB = "rollback", "abort_rollout", "recalibrate", "regate", "run_job"
ACTIONS = (ROLLBACK, ABORT_ROLLOUT, RECALIBRATE, REGATE, RUN_JOB)
PRODUCTION, CANDIDATE = "production", "candidate"
SLO_METRIC = "slo"  # the policy's slo: section judged as one: how many of its limits are broken (no data when inconclusive)


class TriggerPolicy(BaseModel):
    """One trigger: what it reads, when it holds, for how long, and what it calls for."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    name: str = Field("", description="How firings are named; default: the metric and the action.")
    metric: str | None = Field(
        None,
        description="A metric of the task's SLO: p99_latency_ms, p99_ttft_ms, p99_tpot_ms, error_ratio, nan_ratio; or slo, the number"
        " of the slo: section's limits broken.",
    )
    promql: str | None = Field(None, description="Or a PromQL expression giving one number; $model and $version are filled in.")
    above: float | None = None
    below: float | None = None
    hold_seconds: float = Field(0.0, ge=0, alias="for", description="How long the condition must hold before the trigger fires.")
    times: int = Field(1, ge=1, le=100, description="Readings in a row the condition must hold in before the trigger fires (and for:).")
    window: str = Field("5m", pattern=r"^[0-9]+[smh]$", description="The range a named metric is read over.")
    min_samples: int = Field(100, ge=1, description="A named metric with fewer requests than this in the window is no data.")
    action: str = Field(pattern="^(rollback|abort_rollout|recalibrate|regate|run_job)$")
    job: str | None = Field(None, description="With run_job: the job of this code location to launch.")
    version: str | None = Field(None, description="Whose metric: production (the default) or candidate (abort_rollout's default).")

    @model_validator(mode="before")
    @classmethod
    def _duration(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and "for" in raw:
            return {**raw, "for": duration_seconds(raw["for"])}
        return raw

    @model_validator(mode="after")
    def _shape(self) -> "TriggerPolicy":
        if (self.metric is None) == (self.promql is None):
            raise ValueError("a trigger reads one metric: give metric (a name) or promql, not both and not neither")
        if (self.above is None) == (self.below is None):
            raise ValueError("a trigger holds when its value is above or below a threshold: give one of above and below")
        if (self.action == RUN_JOB) != (self.job is not None):
            raise ValueError("job names the job run_job launches, and only run_job takes one")
        if self.version not in (None, PRODUCTION, CANDIDATE):
            raise ValueError(f"version is production or candidate, not {self.version!r}")
        if self.metric == SLO_METRIC and {"window", "min_samples"} & self.model_fields_set:
            raise ValueError("the slo metric is read over the slo: section's window and min_samples; set them there")
        if self.promql is not None and {"window", "min_samples"} & self.model_fields_set:
            raise ValueError("window and min_samples are how a named metric is read; a promql trigger sets its range in its own PromQL")
        if self.promql is not None and "$version" not in self.promql:
            raise ValueError("a trigger's promql must select one version ($version), or it would mix the candidate's and production's")
        return self

    @property
    def reads(self) -> str:
        return self.version or (CANDIDATE if self.action == ABORT_ROLLOUT else PRODUCTION)

    @property
    def label(self) -> str:
        return self.name or f"{self.metric or 'promql'} {'>' if self.above is not None else '<'} {self.threshold:g}: {self.action}"

    @property
    def threshold(self) -> float:
        return self.above if self.above is not None else self.below

    @classmethod
    def of_slo(cls, consecutive_failures: int) -> "TriggerPolicy":
        """The slo: section as a trigger: production rolled back after consecutive_failures failing evaluations in a row."""
        return cls(name=SLO_METRIC, metric=SLO_METRIC, above=0, times=consecutive_failures, action=ROLLBACK)

    def holds(self, value: float) -> bool:
        return value > self.above if self.above is not None else value < self.below
