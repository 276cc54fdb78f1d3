"""Interleaved A/B timing of greedy generation: generated tokens per second and time to first token, candidate against
production on the same prompts and cores, at a given number of concurrent generations.

Each trial generates from every prompt, `concurrency` at a time; throughput is all generated tokens over the trial's
wall time (what a node serves, and what the cost gate prices), latency is each generation's time to first token. Trials
alternate A B, then B A, so drift in machine load hits both (lib/inference/benchmark.PairedRun, summarize)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from modelcd_assets.lib.causal_lm.decoder import Decoder
from modelcd_assets.lib.inference.benchmark import PairedRun


@dataclass(frozen=True)
class Side:
    decoder: Decoder
    adapter: str | None


def _trial(side: Side, prompts: list[list[int]], concurrency: int, max_new_tokens: int) -> tuple[float, list[float]]:
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        runs = list(pool.map(lambda p: side.decoder.generate(p, max_new_tokens, side.adapter), prompts))
    elapsed = time.perf_counter() - start
    return sum(len(r.tokens) + r.stopped_at_eos for r in runs) / elapsed, [1000 * r.first_token_s for r in runs]


def paired_generation(candidate: Side, production: Side, prompts: list[list[int]], concurrency: int, pairs: int,
                      max_new_tokens: int, warmup: int = 1) -> PairedRun:
    for _ in range(max(0, warmup)):
        for side in (candidate, production):
            _trial(side, prompts[:concurrency], concurrency, max_new_tokens)
    tc, tp, lc, lp = [], [], [], []
    for i in range(pairs):
        order = [(candidate, tc, lc), (production, tp, lp)]
        if i % 2:
            order.reverse()
        for side, throughput, latency in order:
            t, ttft = _trial(side, prompts, concurrency, max_new_tokens)
            throughput.append(t)
            latency.extend(ttft)
    return PairedRun(concurrency, tc, tp, lc, lp)
