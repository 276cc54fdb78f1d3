"""The server's Prometheus metrics, in a registry of its own."""

from __future__ import annotations

import logging
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from modelcd_assets.lib.operations import traffic_log
from modelcd_assets.serving.node_share import NodeShare

log = logging.getLogger("modelcd.serve")

LABELS = ("model", "version", "adapter")
# Fine below 100 ms, where a small classifier's requests sit, so histogram_quantile can resolve p99.
LATENCY_BUCKETS = (0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0)
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0)
SWAP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A shadowed classifier request: the candidate's top-class probability minus production's, per text.
CONFIDENCE_SHIFT_BUCKETS = (-0.5, -0.25, -0.1, -0.05, -0.02, -0.01, -0.005, 0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5)
# A shadowed generation: log2 of the candidate's answer tokens over production's (1: twice as long).
LENGTH_RATIO_BUCKETS = (-2.0, -1.0, -0.5, -0.25, -0.1, 0.0, 0.1, 0.25, 0.5, 1.0, 2.0)
ANSWER_TOKEN_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096)
# What a request cost (serving/node_share.py), ten buckets a decade (each 1.26x the last), so that a rollout's tail test of
# 1.5x sees two buckets of difference: from a nano-dollar (a small classifier's request on a cheap node) to 10 cents.
REQUEST_COST_BUCKETS = tuple(float(f"{10 ** (k / 10):.3g}") for k in range(-90, -9))
# What a causal LM's answer cost per 1M of its tokens: from a tenth of a cent to 1000 USD, ten buckets a decade.
TOKEN_COST_BUCKETS = tuple(float(f"{10 ** (k / 10):.3g}") for k in range(-30, 31))


class LiveDriftCollector:
    """The live drift verdict the live_traffic asset last wrote for this model, read at scrape time.

    Both gauges are exported only for a judged window: absent series mean not judged yet, too little traffic, or a
    verdict file that cannot be read (logged); a scrape never fails on it.
    """

    def __init__(self, state_root: Path, model: str):
        self.state_root, self.model = Path(state_root), model

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "modelcd_live_input_drift_share",
                "Share of text descriptors of sampled live traffic that drifted from the reference data.",
                labels=["model"],
            ),
            GaugeMetricFamily(
                "modelcd_live_drift_detected",
                "1 when live traffic drifted from the reference data at the last live_traffic run, else 0.",
                labels=["model"],
            ),
        )

    def describe(self) -> list[GaugeMetricFamily]:
        return list(self._families())  # names only, so the registry refuses a clash without reading the file

    def collect(self) -> list[GaugeMetricFamily]:
        share, detected = self._families()
        try:
            verdict = traffic_log.read_live_drift(self.state_root, self.model)
        except (OSError, ValueError) as e:
            log.warning("live drift not exported: %s", e)
            verdict = None
        if verdict is not None and verdict.judged and verdict.input_drifted_share is not None:
            share.add_metric([self.model], verdict.input_drifted_share)
            detected.add_metric([self.model], 1.0 if verdict.detected else 0.0)
        return [share, detected]


class Metrics:
    """What every server exports: its versions' requests, errors, NaN outputs and cost per request (what trigger_sensor and
    a rollout step judge), swaps, and requests answered before they reached a model.

    node_usd_per_hour: the policy's cost.node_usd_per_hour, what a request's share of the node's time (node_share) is priced at."""

    def __init__(self, node_usd_per_hour: float, live_drift: Collector | None = None) -> None:
        if not node_usd_per_hour > 0:
            raise ValueError(f"cost.node_usd_per_hour must be above 0 to price a request, not {node_usd_per_hour!r}")
        self.usd_per_second = node_usd_per_hour / 3600
        self.node_share = NodeShare()
        self.registry = CollectorRegistry()
        if live_drift is not None:
            self.registry.register(live_drift)
        self.requests = Counter("modelcd_requests", "Requests answered by a loaded version.", LABELS, registry=self.registry)
        self.errors = Counter("modelcd_request_errors", "Requests that failed on the server side.", LABELS, registry=self.registry)
        self.nan_outputs = Counter(
            "modelcd_nan_outputs",
            "Requests whose outputs (a classifier's logits, a causal LM's next-token logits) contained NaN or Inf.",
            LABELS,
            registry=self.registry,
        )
        self.request_cost = Histogram(
            "modelcd_request_cost_usd",
            "Per answered request: its share of the node's time while it was in flight (the time divided equally among the "
            "requests in flight), priced at cost.node_usd_per_hour.",
            LABELS,
            buckets=REQUEST_COST_BUCKETS,
            registry=self.registry,
        )
        self.swaps = Counter(
            "modelcd_adapter_swaps",
            "Version loads and switches, by outcome (switched, loaded, refused).",
            ("model", "outcome"),
            registry=self.registry,
        )
        self.swap_seconds = Histogram(
            "modelcd_adapter_swap_duration_seconds",
            "Load, verify, probe and switch time of a version, by INT8 variant.",
            ("model", "variant"),
            buckets=SWAP_BUCKETS,
            registry=self.registry,
        )
        self.serving = Gauge("modelcd_serving_info", "1 for the version served by default.", LABELS, registry=self.registry)
        self.alias_refused = Gauge(
            "modelcd_alias_refused",
            "1 for a version the production alias points at that may not be served (no valid verdict "
            "over its bytes); the previous version keeps serving.",
            ("model", "version"),
            registry=self.registry,
        )
        # Apart from the version's series on purpose: what never reached a model must not move the latency or error ratio the SLO judges.
        self.rejected = Counter(
            "modelcd_requests_rejected",
            "Requests answered before they reached a model (over a limit, malformed, "
            "unknown version, not ready, too many at once), by reason.",
            ("model", "reason"),
            registry=self.registry,
        )
        # A rollout (serving/rollout.py): the candidate's share, states not followed, and shadow copies.
        self.rollout_share = Gauge(
            "modelcd_rollout_share",
            "Share of requests a rollout's candidate takes now, by arm: shadow (copies, never returned) or canary (it answers them).",
            ("model", "arm"),
            registry=self.registry,
        )
        self.rollout_refused = Counter(
            "modelcd_rollout_refused",
            "Polls that found a rollout state this server does not follow (unverified, stale, started against another "
            "production, a version that may not be served, the registry unreadable), by reason; production alone answers.",
            ("model", "reason"),
            registry=self.registry,
        )
        self.shadow_dropped = Counter(
            "modelcd_shadow_dropped",
            "Shadow copies not sent to the candidate because the copies already in flight filled the server's shadow capacity, or "
            "(a causal LM's) stopped after waiting serving.shadow_max_wait_s for room beside the callers' generations.",
            ("model",),
            registry=self.registry,
        )
        self.shadow_pairs = Counter(
            "modelcd_shadow_pairs",
            "Answers production gave whose copy the candidate (the version label) gave too: a classifier's per text, a causal LM's per "
            "greedy generation (sampled ones differ by chance).",
            LABELS,
            registry=self.registry,
        )
        self.shadow_agreements = Counter(
            "modelcd_shadow_agreements",
            "Shadowed pairs whose answers agree: a classifier's label, per text; a causal LM's first token, per greedy generation.",
            LABELS,
            registry=self.registry,
        )
        self.samples_dropped = Counter(
            "modelcd_traffic_samples_dropped",
            "Sampled texts not written to the traffic log: its writer's queue was full, or the record was too long.",
            ("model",),
            registry=self.registry,
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class ServerMetrics(Metrics):
    """A classifier's server."""

    def __init__(self, node_usd_per_hour: float, live_drift: Collector | None = None) -> None:
        super().__init__(node_usd_per_hour, live_drift)
        self.latency = Histogram(
            "modelcd_request_duration_seconds",
            "Time to answer a classify request.",
            LABELS,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.texts = Counter("modelcd_classified_texts", "Texts classified.", LABELS, registry=self.registry)
        self.confidence_shift = Histogram(
            "modelcd_shadow_confidence_shift",
            "Per shadowed text: the candidate's (the version label) top-class probability minus production's.",
            LABELS,
            buckets=CONFIDENCE_SHIFT_BUCKETS,
            registry=self.registry,
        )


class LmServerMetrics(Metrics):
    """A causal LM's server: per version, time to first token and per output token, tokens in and out; per model, the KV
    cache held by generations in flight and the cost per 1M generated tokens the server achieves while it is busy."""

    def __init__(self, node_usd_per_hour: float, live_drift: Collector | None = None) -> None:
        super().__init__(node_usd_per_hour, live_drift)
        self.ttft = Histogram(
            "modelcd_llm_time_to_first_token_seconds",
            "Time from a generation's admission to its first token.",
            LABELS,
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.tpot = Histogram(
            "modelcd_llm_time_per_output_token_seconds",
            "Mean time per generated token after the first, per generation.",
            LABELS,
            buckets=TPOT_BUCKETS,
            registry=self.registry,
        )
        self.batch_rows = Histogram(
            "modelcd_llm_decode_batch_rows",
            "Greedy generations of one version decoded together, per batched decode step.",
            ["model"],
            buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256),
            registry=self.registry,
        )
        self.prompt_tokens = Counter("modelcd_llm_prompt_tokens", "Prompt tokens of generations.", LABELS, registry=self.registry)
        self.completion_tokens = Counter("modelcd_llm_completion_tokens", "Tokens generated.", LABELS, registry=self.registry)
        self.answer_tokens = Histogram(
            "modelcd_llm_answer_tokens",
            "Tokens each answer generated, EOS included.",
            LABELS,
            buckets=ANSWER_TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.token_cost = Histogram(
            "modelcd_llm_answer_cost_usd_per_1m_tokens",
            "Per answer: its cost (modelcd_request_cost_usd) over the tokens it generated, EOS included, x 1e6.",
            LABELS,
            buckets=TOKEN_COST_BUCKETS,
            registry=self.registry,
        )
        self.answers_at_eos = Counter(
            "modelcd_llm_answers_at_eos", "Answers that ended with the model's end of turn (EOS).", LABELS, registry=self.registry
        )
        self.shadow_eos_pairs = Counter(
            "modelcd_shadow_eos_pairs",
            "Shadowed greedy generations whose production answer ended its turn (EOS), per candidate (the version label).",
            LABELS,
            registry=self.registry,
        )
        self.shadow_eos_kept = Counter(
            "modelcd_shadow_eos_kept",
            "Of modelcd_shadow_eos_pairs, those whose candidate copy ended its turn too.",
            LABELS,
            registry=self.registry,
        )
        self.length_ratio = Histogram(
            "modelcd_shadow_length_ratio",
            "Per shadowed generation: log2 of the candidate's (the version label) answer tokens over production's.",
            LABELS,
            buckets=LENGTH_RATIO_BUCKETS,
            registry=self.registry,
        )
        self.kv_cache_bytes = Gauge(
            "modelcd_llm_kv_cache_bytes",
            "KV cache allocated by the generations in flight (prompt + max_tokens each).",
            ("model",),
            registry=self.registry,
        )
        self.generations = Gauge("modelcd_llm_generations_in_flight", "Generations running now.", ("model",), registry=self.registry)
        self.cost = Gauge(
            "modelcd_llm_cost_usd_per_1m_tokens",
            "cost.node_usd_per_hour / (generated tokens per busy second x 3600) x 1e6: what 1M tokens "
            "cost at the throughput this server achieves while at least one generation runs.",
            ("model",),
            registry=self.registry,
        )
