"""The Prometheus server the SLO sensor reads production metrics from."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from modelcd_assets.lib.judging.policy import SloPolicy
from modelcd_assets.lib.judging.slo import SloVerdict, evaluate_slo


class PrometheusResource(dg.ConfigurableResource):
    """A Prometheus HTTP API, e.g. http://127.0.0.1:9090 (the embedded default) or the cluster's Prometheus service."""

    url: str = Field(description="Base URL of the Prometheus HTTP API")

    def evaluate(self, model: str, version: str, policy: SloPolicy, task: str) -> SloVerdict:
        return evaluate_slo(self.url, model, version, policy, task)
