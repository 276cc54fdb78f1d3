"""The server's Prometheus metrics, in a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LABELS = ("model", "version", "adapter")
# Fine below 100 ms, where a small classifier's requests sit, so histogram_quantile can resolve p99.
LATENCY_BUCKETS = (0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0)
SWAP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram("modelcd_request_duration_seconds", "Time to answer a classify request.", LABELS,
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.requests = Counter("modelcd_requests", "Classify requests answered by a loaded version.", LABELS, registry=self.registry)
        self.errors = Counter("modelcd_request_errors", "Classify requests that failed on the server side.", LABELS, registry=self.registry)
        self.nan_outputs = Counter("modelcd_nan_outputs", "Classify requests whose outputs contained NaN or Inf.", LABELS, registry=self.registry)
        self.texts = Counter("modelcd_classified_texts", "Texts classified.", LABELS, registry=self.registry)
        self.swaps = Counter("modelcd_adapter_swaps", "Version loads and switches, by outcome (switched, loaded, refused).", ("model", "outcome"),
                             registry=self.registry)
        self.swap_seconds = Histogram("modelcd_adapter_swap_duration_seconds", "Load, verify, probe and switch time of a version, by INT8 variant.", ("model", "variant"),
                                      buckets=SWAP_BUCKETS, registry=self.registry)
        self.serving = Gauge("modelcd_serving_info", "1 for the version served by default.", LABELS, registry=self.registry)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
