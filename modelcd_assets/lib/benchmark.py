"""Interleaved A/B latency and throughput measurement of ONNX Runtime sessions."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from modelcd_assets.lib.runtime import feeds_for
from modelcd_assets.lib.stats import median_ci


@dataclass(frozen=True)
class PairedRun:
    """Per-pair throughputs (items/s) of candidate and production, and batch-1 latencies (ms)."""

    batch_size: int
    candidate_throughput: list[float]
    production_throughput: list[float]
    candidate_latency_ms: list[float]
    production_latency_ms: list[float]

    @property
    def ratios(self) -> np.ndarray:
        return np.asarray(self.candidate_throughput) / np.asarray(self.production_throughput)


def _trial(sess: ort.InferenceSession, feed: dict[str, np.ndarray], calls: int) -> tuple[float, list[float]]:
    lat = []
    start = time.perf_counter()
    for _ in range(calls):
        t = time.perf_counter()
        sess.run(["logits"], feed)
        lat.append(1000 * (time.perf_counter() - t))
    elapsed = time.perf_counter() - start
    batch = len(next(iter(feed.values())))
    return calls * batch / elapsed, lat


def batch_feed(feeds: dict[str, np.ndarray], batch_size: int) -> dict[str, np.ndarray]:
    """The first batch_size rows, tiled when there are fewer."""
    n = len(feeds["input_ids"])
    idx = np.arange(batch_size) % n
    return {k: v[idx] for k, v in feeds.items()}


def paired_throughput(candidate: ort.InferenceSession, production: ort.InferenceSession, feeds: dict[str, np.ndarray],
                      batch_size: int, pairs: int, calls_per_trial: int, warmup: int = 2, min_trial_s: float = 0.05) -> PairedRun:
    """Alternate candidate and production trials (A B, then B A) so drift in machine load hits both.

    Each trial makes at least calls_per_trial calls, and more when calls are so fast that a trial
    would take under min_trial_s: timer and scheduler noise would then swamp the difference.
    """
    feed_c = feeds_for(candidate, batch_feed(feeds, batch_size))
    feed_p = feeds_for(production, batch_feed(feeds, batch_size))
    slowest = 0.0
    for _ in range(max(1, warmup)):
        for sess, feed in ((candidate, feed_c), (production, feed_p)):
            t = time.perf_counter()
            sess.run(["logits"], feed)
            slowest = max(slowest, time.perf_counter() - t)
    calls_per_trial = max(calls_per_trial, int(np.ceil(min_trial_s / max(slowest, 1e-6))))
    tc, tp, lc, lp = [], [], [], []
    for i in range(pairs):
        order = [(candidate, feed_c, tc, lc), (production, feed_p, tp, lp)]
        if i % 2:
            order.reverse()
        for sess, feed, thr, lat in order:
            t, l = _trial(sess, feed, calls_per_trial)
            thr.append(t)
            lat.extend(l)
    return PairedRun(batch_size, tc, tp, lc, lp)


def summarize(run: PairedRun, confidence: float) -> dict:
    """Median paired ratio with CI, throughput and latency percentiles of both sides."""
    med, lo, hi = median_ci(run.ratios, confidence)
    return {
        "batch_size": run.batch_size,
        "pairs": len(run.ratios),
        "ratio_median": med, "ratio_ci_low": lo, "ratio_ci_high": hi,
        "candidate_items_per_s": float(np.median(run.candidate_throughput)),
        "production_items_per_s": float(np.median(run.production_throughput)),
        "candidate_p50_ms": float(np.percentile(run.candidate_latency_ms, 50)),
        "candidate_p99_ms": float(np.percentile(run.candidate_latency_ms, 99)),
        "production_p50_ms": float(np.percentile(run.production_latency_ms, 50)),
        "production_p99_ms": float(np.percentile(run.production_latency_ms, 99)),
    }


def merge_runs(a: PairedRun, b: PairedRun) -> PairedRun:
    """One run of the pairs of both (a second round after an inconclusive first)."""
    return PairedRun(a.batch_size, a.candidate_throughput + b.candidate_throughput, a.production_throughput + b.production_throughput,
                     a.candidate_latency_ms + b.candidate_latency_ms, a.production_latency_ms + b.production_latency_ms)
