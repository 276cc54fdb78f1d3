"""One request's account, the same object for every task: rejected before a model (counted by reason in
modelcd_requests_rejected_total), or admitted to a version and counted in that version's series, which trigger_sensor
and a rollout step judge: a request, an error, non-finite outputs, and what it cost (its share of the node's time while
it was in flight, serving/node_share.py, priced at cost.node_usd_per_hour). Each task's account adds what its requests
measure."""

from __future__ import annotations

import time

from modelcd_assets.serving.metrics import Metrics
from modelcd_assets.serving.rejections import Rejected
from modelcd_assets.serving.versions import ServedVersion


class RequestAccount:
    def __init__(self, metrics: Metrics, model: str):
        self.metrics, self.model = metrics, model
        self.started = time.perf_counter()
        self.admitted_at: float | None = None
        self.labels: tuple[str, str, str] | None = None
        self._entered: float | None = None  # the node's shared clock when the request was admitted
        self.cost_usd: float | None = None  # once answered

    def reject(self, r: Rejected) -> Rejected:
        """Counted by reason, never as a request of a version: what never reached a model must not move its SLO."""
        self.metrics.rejected.labels(self.model, r.reason).inc()
        return r

    def admit(self, served: ServedVersion) -> None:
        """From now on the request is one of served's."""
        self.labels = (served.model, served.version, served.adapter_label)
        self.admitted_at = time.perf_counter()
        self._entered = self.metrics.node_share.enter()

    def abandon(self) -> None:
        """A shadow copy stopped before its answer (serving/lm/generation.Yielded): it leaves the node's clock, and is
        counted as no request of its version."""
        self.metrics.node_share.leave(self._entered)

    def non_finite(self) -> None:
        self.metrics.nan_outputs.labels(*self.labels).inc()

    def finish(self, failed: bool) -> None:
        """The request answered by its version, failed on the server's side or not; called once."""
        self.metrics.requests.labels(*self.labels).inc()
        self.cost_usd = self.metrics.node_share.leave(self._entered) * self.metrics.usd_per_second
        self.metrics.request_cost.labels(*self.labels).observe(self.cost_usd)
        if failed:
            self.metrics.errors.labels(*self.labels).inc()
