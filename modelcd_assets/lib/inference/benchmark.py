"""Interleaved A/B latency and throughput measurement of ONNX Runtime sessions.

Each trial is timed twice: by the wall clock (what a user waits for, and what the p99 SLO and the cost ceiling judge) and
by the process's CPU time, over all its threads (the work each item costs). The paired speed ratio is judged on the CPU
time: another process on the machine stretches a trial's wall time by whenever it holds the cores, which differs from one
trial to the next, but not the CPU time the trial's own work takes, so beside a busy core the CPU ratio still tells two
graphs apart while the wall ratio measures mostly the other process. What the CPU ratio cannot see is a graph that does
the same work on fewer threads; the p99 latency at batch 1, on the wall clock, is judged for that. A thread that waits
is hardly counted as work: a classifier's sessions do not spin (runtime.session), and a causal LM's spin at most 10 us
at a time before they sleep (lib/causal_lm/decoder.SPIN_OPTIONS), on both sides of a pair alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from modelcd_assets.lib.inference.runtime import OnnxModel, feeds_for
from modelcd_assets.lib.inference.tokens import buckets
from modelcd_assets.lib.judging.stats import median_ci

# The evaluation texts every throughput trial runs (the gate's and production_recheck's), at their real lengths (what the
# server sees), in length buckets of the batch size.
SAMPLE_TEXTS = 64


@dataclass(frozen=True)
class Trial:
    """One side's trial: items per wall second, items per CPU second of the process, and each call's latency (ms)."""

    items_per_s: float
    items_per_cpu_s: float
    latency_ms: list[float]


class Stopwatch:
    """Wall and process CPU time of a block: `with Stopwatch() as sw: ...`, then sw.wall_s and sw.cpu_s."""

    def __enter__(self) -> "Stopwatch":
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s, self.cpu_s = time.perf_counter() - self._wall, time.process_time() - self._cpu

    def trial(self, items: int, latency_ms: list[float]) -> Trial:
        # The CPU clock ticks in nanoseconds on Linux; a trial of real work never reads 0, but a floor keeps a ratio finite.
        return Trial(items / self.wall_s, items / max(self.cpu_s, 1e-9), latency_ms)


@dataclass(frozen=True)
class PairedRun:
    """Per-pair throughputs of candidate and production (items per wall second, and per process CPU second), and
    batch-1 latencies (ms)."""

    batch_size: int
    candidate_throughput: list[float]
    production_throughput: list[float]
    candidate_latency_ms: list[float]
    production_latency_ms: list[float]
    candidate_cpu_throughput: list[float]
    production_cpu_throughput: list[float]

    @classmethod
    def of(cls, batch_size: int, candidate: list[Trial], production: list[Trial]) -> "PairedRun":
        return cls(
            batch_size,
            [t.items_per_s for t in candidate],
            [t.items_per_s for t in production],
            [ms for t in candidate for ms in t.latency_ms],
            [ms for t in production for ms in t.latency_ms],
            [t.items_per_cpu_s for t in candidate],
            [t.items_per_cpu_s for t in production],
        )

    @property
    def ratios(self) -> np.ndarray:
        """The judged ratio of each pair: candidate's items per CPU second over production's."""
        return np.asarray(self.candidate_cpu_throughput) / np.asarray(self.production_cpu_throughput)

    @property
    def wall_ratios(self) -> np.ndarray:
        return np.asarray(self.candidate_throughput) / np.asarray(self.production_throughput)


def _trial(sess: ort.InferenceSession, batches: list[dict[str, np.ndarray]], passes: int) -> Trial:
    """passes over every batch, timed on the wall clock and the process's CPU clock, with the latency of each call."""
    lat = []
    with Stopwatch() as sw:
        for _ in range(passes):
            for feed in batches:
                t = time.perf_counter()
                sess.run(["logits"], feed)
                lat.append(1000 * (time.perf_counter() - t))
    return sw.trial(passes * sum(len(b["input_ids"]) for b in batches), lat)


def paired_throughput(
    candidate: OnnxModel,
    production: OnnxModel,
    feeds: dict[str, np.ndarray],
    batch_size: int,
    pairs: int,
    passes_per_trial: int = 1,
    warmup: int = 1,
    min_trial_s: float = 0.05,
) -> PairedRun:
    """Alternate candidate and production trials (A B, then B A) so drift in machine load hits both.

    The texts of feeds are run at their real lengths, in the length buckets of batch_size every model
    call uses (tokens.buckets). A trial makes passes_per_trial passes over all of them, and more when a
    pass is so fast that a trial would take under min_trial_s: timer and scheduler noise would then
    swamp the difference. Each side's batch is what its model takes per call (OnnxModel.batch), so each is
    timed as it is served.
    """
    feed_c = [feeds_for(candidate.session, b) for _, b in buckets(feeds, candidate.batch(batch_size))]
    feed_p = [feeds_for(production.session, b) for _, b in buckets(feeds, production.batch(batch_size))]
    candidate, production = candidate.session, production.session
    slowest = 0.0
    for _ in range(max(1, warmup)):
        for sess, feed in ((candidate, feed_c), (production, feed_p)):
            t = time.perf_counter()
            _trial(sess, feed, 1)
            slowest = max(slowest, time.perf_counter() - t)
    passes_per_trial = max(passes_per_trial, int(np.ceil(min_trial_s / max(slowest, 1e-6))))
    tc: list[Trial] = []
    tp: list[Trial] = []
    for i in range(pairs):
        order = [(candidate, feed_c, tc), (production, feed_p, tp)]
        if i % 2:
            order.reverse()
        for sess, feed, trials in order:
            trials.append(_trial(sess, feed, passes_per_trial))
    return PairedRun.of(batch_size, tc, tp)


def best_items_per_s(models: dict[str, OnnxModel], feeds: dict[str, np.ndarray], rounds: int, batch_size: int) -> dict[str, float]:
    """Items/s of each model over all of feeds, the best of rounds timed in interleaved order (A B C, A B C, ...),
    so a burst of load on the machine hits them all; one warm-up pass each first."""
    for model in models.values():
        model.logits(feeds, batch_size)
    best = dict.fromkeys(models, float("inf"))
    for _ in range(rounds):
        for name, model in models.items():
            t = time.perf_counter()
            model.logits(feeds, batch_size)
            best[name] = min(best[name], time.perf_counter() - t)
    return {name: len(feeds["attention_mask"]) / t for name, t in best.items()}


def summarize(run: PairedRun, confidence: float) -> dict:
    """Median paired ratio with CI (the judged one, per CPU second, and the wall clock's), throughput and latency
    percentiles of both sides."""
    med, lo, hi = median_ci(run.ratios, confidence)
    wall_med, wall_lo, wall_hi = median_ci(run.wall_ratios, confidence)
    return {
        "batch_size": run.batch_size,
        "pairs": len(run.ratios),
        "ratio_basis": "cpu",
        "ratio_median": med,
        "ratio_ci_low": lo,
        "ratio_ci_high": hi,
        "wall_ratio_median": wall_med,
        "wall_ratio_ci_low": wall_lo,
        "wall_ratio_ci_high": wall_hi,
        "candidate_items_per_s": float(np.median(run.candidate_throughput)),
        "production_items_per_s": float(np.median(run.production_throughput)),
        "candidate_p50_ms": float(np.percentile(run.candidate_latency_ms, 50)),
        "candidate_p99_ms": float(np.percentile(run.candidate_latency_ms, 99)),
        "production_p50_ms": float(np.percentile(run.production_latency_ms, 50)),
        "production_p99_ms": float(np.percentile(run.production_latency_ms, 99)),
    }


def merge_runs(a: PairedRun, b: PairedRun) -> PairedRun:
    """One run of the pairs of both (a second round after an inconclusive first)."""
    return PairedRun(
        a.batch_size,
        a.candidate_throughput + b.candidate_throughput,
        a.production_throughput + b.production_throughput,
        a.candidate_latency_ms + b.candidate_latency_ms,
        a.production_latency_ms + b.production_latency_ms,
        a.candidate_cpu_throughput + b.candidate_cpu_throughput,
        a.production_cpu_throughput + b.production_cpu_throughput,
    )


def cost_inputs(unit: str, summary: dict, has_production: bool) -> dict:
    """What the cost gate prices, from one paired summary: the candidate's units/s, and against production the paired
    speed ratio's CI (lib/judging/gates.judge_cost). A candidate that runs production's own graph bytes
    (same_graph_sha256) has production's speed by construction: its ratio is exactly 1, not the timing's noise."""
    same = summary.get("same_graph_sha256") if has_production else None
    ratio = [1.0, 1.0, 1.0] if same else [summary["ratio_median"], summary["ratio_ci_low"], summary["ratio_ci_high"]]
    return {
        "unit": unit,
        "candidate_units_per_s": summary["candidate_items_per_s"],
        "production_units_per_s": summary["production_items_per_s"] if has_production else None,
        "speed_ratio": ratio if has_production else None,
        **({"same_graph_sha256": same} if same else {}),
    }
