"""Interleaved A/B timing of greedy generation: generated tokens per second and time to first token, one side against
another on the same prompts and cores, at a given number of concurrent generations; and a base build's own timing.

Each trial generates from every prompt, `concurrency` at a time; throughput is all generated tokens over the trial's
wall time (what a node serves, and what the cost ceiling prices) and over the process's CPU time (the judged ratio's),
latency is each generation's time to first token. Trials alternate A B, then B A, so drift in machine load hits both
(lib/inference/benchmark: PairedRun, summarize).

Every adapter of a base runs the base build's graph, its LoRA slots of a fixed rank and targets: an adapter changes the
values in the slots, never the work per token. So the speed is a property of the build, timed once per build and timing
setup with the slots at their zero defaults, and kept in the build folder (build_timing); against another build only when
a candidate's base build is not production's.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone

from modelcd_assets.lib.causal_lm.build import BaseBuild
from modelcd_assets.lib.causal_lm.chats import Chat
from modelcd_assets.lib.causal_lm.decoder import SPIN_US, Decoder, cores
from modelcd_assets.lib.causal_lm.variants import INT8
from modelcd_assets.lib.hashing import folder_hash, text_hash
from modelcd_assets.lib.inference.benchmark import PairedRun, Stopwatch, Trial, merge_runs, summarize
from modelcd_assets.lib.inference.builds import folder_lock, read_json, write_json
from modelcd_assets.lib.inference.tokens import check_generation_length
from modelcd_assets.lib.judging.policy import GenerationPolicy, ThroughputPolicy


@dataclass(frozen=True)
class Side:
    decoder: Decoder
    adapter: str | None


def _trial(side: Side, prompts: list[list[int]], concurrency: int, max_new_tokens: int) -> Trial:
    with Stopwatch() as sw:
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            runs = list(pool.map(lambda p: side.decoder.generate(p, max_new_tokens, side.adapter), prompts))
    return sw.trial(sum(len(r.tokens) + r.stopped_at_eos for r in runs), [1000 * r.first_token_s for r in runs])


def paired_generation(
    candidate: Side, production: Side, prompts: list[list[int]], concurrency: int, pairs: int, max_new_tokens: int, warmup: int = 1
) -> PairedRun:
    for _ in range(max(0, warmup)):
        for side in (candidate, production):
            _trial(side, prompts[:concurrency], concurrency, max_new_tokens)
    tc: list[Trial] = []
    tp: list[Trial] = []
    for i in range(pairs):
        order = [(candidate, tc), (production, tp)]
        if i % 2:
            order.reverse()
        for side, trials in order:
            trials.append(_trial(side, prompts, concurrency, max_new_tokens))
    return PairedRun.of(concurrency, tc, tp)


def timed(a: Side, b: Side, prompts: list[list[int]], gen: GenerationPolicy, tp: ThroughputPolicy) -> dict[str, dict]:
    """A against B at each concurrency; a second round only while the ratio's CI straddles min_ratio, up to max_pairs."""
    for p in prompts:
        check_generation_length(len(p), gen.speed_tokens, a.decoder.context_length)
    results = {}
    for concurrency in gen.concurrency:
        run = paired_generation(a, b, prompts, concurrency, tp.pairs, gen.speed_tokens)
        summary = summarize(run, tp.confidence)
        while a is not b and summary["ratio_ci_low"] < tp.min_ratio <= summary["ratio_ci_high"] and len(run.ratios) < tp.max_pairs:
            run = merge_runs(
                run,
                paired_generation(a, b, prompts, concurrency, min(tp.pairs, tp.max_pairs - len(run.ratios)), gen.speed_tokens, warmup=0),
            )
            summary = summarize(run, tp.confidence)
        results[str(concurrency)] = summary
    return results


def build_timing(
    build: BaseBuild,
    against: BaseBuild | None,
    chats: list[Chat],
    gen: GenerationPolicy,
    tp: ThroughputPolicy,
    variant: str = INT8.name,
    against_variant: str = INT8.name,
) -> dict:
    """The base build's timing with no adapter (the work of any adapter of it) on its weight variant, kept in the build
    folder per timing setup: timed against itself (the noise floor), or interleaved against another build's weights
    (production's: against, on against_variant) when it is another build or variant. measured_now says whether this call
    timed it."""
    setup = {
        "prompts": [[c.system, c.user] for c in chats],
        "speed_tokens": gen.speed_tokens,
        "concurrency": list(gen.concurrency),
        "pairs": tp.pairs,
        "confidence": tp.confidence,
        **({"min_ratio": tp.min_ratio, "max_pairs": tp.max_pairs} if against else {}),
        "threads": cores(),
        "spin_us": SPIN_US,  # a build timed while its threads did not spin is timed again
    }
    # The INT8 weights' timings keep the keys they had before there were variants.
    names = [] if variant == against_variant == INT8.name else [variant, against_variant if against else ""]
    key = text_hash(json.dumps(setup, sort_keys=True), against.dir.name if against else "itself", *names)[:16]
    path = build.timing_dir / f"{key}.json"
    with folder_lock(build.dir, ".timing.lock"):  # one timing of a build at a time: two would slow each other
        if path.is_file():
            return read_json(path) | {"measured_now": False}
        start = time.perf_counter()
        side = Side(Decoder(build.weights(variant), setup["threads"]), None)
        other = Side(Decoder(against.weights(against_variant), setup["threads"]), None) if against else side
        prompts = [side.decoder.encode_chat(c.messages()) for c in chats]
        record = {
            "build": build.dir.name,
            "variant": variant,
            "int8_sha256": folder_hash(build.weights(variant)),  # the timed weights' (the name older timings have)
            "against": against.dir.name if against else None,
            "against_variant": against_variant if against else None,
            "against_int8_sha256": folder_hash(against.weights(against_variant)) if against else None,
            "setup": setup,
            "median_prompt_tokens": sorted(len(p) for p in prompts)[len(prompts) // 2],
            "batches": timed(side, other, prompts, gen, tp),
            "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        record["seconds"] = round(time.perf_counter() - start, 1)
        write_json(path, record)
        return record | {"measured_now": True}
