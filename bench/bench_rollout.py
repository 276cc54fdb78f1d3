"""Rollouts on live traffic: what shadowing costs production, how often a clean version is aborted, and how soon each
live-only fault is stopped.

Run after `make demo`: python bench/bench_rollout.py [--name support-reply]   (make bench-rollout runs both demo models)
Everything runs in a fault sandbox (faults/sandbox.py): an isolated copy of the demo model's production, its own
registry, Dagster instance and key pair; the user's state is only read.
  1. shadow cost: `modelcd serve` answering 2 callers back to back, in alternating phases with no rollout and with a
     signed shadow 0.2 state (an identical copy with an offline verdict as the candidate), production's requests only:
     p99 with shadowing over p99 without, per pair of phases, and the copies dropped for want of a free slot;
  2. false aborts: --clean byte-identical copies rolled out through the demo policy's steps, each must reach production;
  3. detection: every live-only fault class of `modelcd faults run`, where it was stopped and the samples it took.
Registration to 100% under the demo's policy, for each task, is the demo's own phases (bench/bench_demo.py).
Writes bench/results/rollout.json (a classifier) or rollout_llm.json (a causal LM); docs/benchmarks.md renders them
(bench/render_docs.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from machine import machine

from modelcd_assets.faults.builders import identical
from modelcd_assets.faults.catalog import suite_of
from modelcd_assets.faults.live_faults import STEP_SECONDS, roll_out, rolling_out
from modelcd_assets.faults.outcomes import PROMOTED
from modelcd_assets.faults.runner import class_outcome
from modelcd_assets.faults.sandbox import open_sandbox
from modelcd_assets.launch import ROLLING_OUT
from modelcd_assets.lib.judging.rollout_policy import RolloutPolicy
from modelcd_assets.lib.operations.settings import apply_local_defaults
from modelcd_assets.lib.release.rollout import ABORT, moved, read_state, started, write_state
from modelcd_assets.lib.tasks.names import CAUSAL_LM, CLASSIFICATION
from modelcd_assets.live_rollout import live_server
from modelcd_assets.serving.loadgen import run_load

RESULTS = {
    CLASSIFICATION: Path(__file__).parent / "results" / "rollout.json",
    CAUSAL_LM: Path(__file__).parent / "results" / "rollout_llm.json",
}
SHADOW_SHARE = 0.2
TARGETS = {"shadow_p99_ratio": 1.2, "clean_aborted": 0}


def _p99(latencies: list[float]) -> float:
    return float(np.percentile(np.asarray(latencies) * 1000, 99))


def shadow_cost(sb, pairs: int, seconds: float, folder: Path) -> dict:
    """Production's p99 with a shadow 0.2 state against none, on one server, alternating phases (none first in odd pairs)."""
    api, batches = suite_of(sb.task).live_load(sb, "traffic_current")
    candidate = sb.register(identical(sb.prod, sb.work / "shadow-candidate"))
    policy = RolloutPolicy.model_validate({"steps": [{"shadow": SHADOW_SHARE, "for": "1h"}, {"canary": 0.5, "for": "1h"}, "promote"]})
    reg, key = sb.registry, sb.registry.keys.require_private()
    phases = []
    with rolling_out(sb), sb.active():
        run = sb.gate(candidate)  # its offline verdict: the server shadows only a version that holds one
        if run.outcome != ROLLING_OUT:
            raise SystemExit(f"the shadow candidate {candidate.uri} was not rolled out: {run.outcome} {run.error}")
        first = read_state(reg, sb.name)
        write_state(
            reg, moved(first, ABORT, policy, "bench: the shadow phases set the state themselves"), first.sequence, key, sb.alias_lock
        )
        with live_server(sb.name, folder, sb.env) as live:
            live.wait_ready(sb.production.version)
            for i in range(pairs * 2):
                shadowed = (i % 2 == 1) if (i // 2) % 2 == 0 else (i % 2 == 0)
                now = read_state(reg, sb.name)
                if shadowed:
                    state = started(candidate, sb.production.version, policy, "bench", now)
                    write_state(reg, state, now.sequence, key, sb.alias_lock)
                    deadline = time.monotonic() + 30
                    while _metric(live.url, "modelcd_rollout_share", model=sb.name, arm="shadow") != SHADOW_SHARE:
                        if time.monotonic() > deadline:
                            raise SystemExit("the server did not follow the shadow state within 30 s")
                        time.sleep(0.2)
                dropped_before = _metric(live.url, "modelcd_shadow_dropped_total", model=sb.name)
                paired_before = _metric(live.url, "modelcd_shadow_pairs_total", model=sb.name)
                stop = threading.Event()
                timer = threading.Timer(seconds, stop.set)
                timer.start()
                results = run_load(live.url, batches, 0, 2, stop, api)
                answered = [r for r in results if r["status"] == 200 and r["version"] == sb.production.version and r["arm"] is None]
                phases.append(
                    {
                        "shadow": shadowed,
                        "requests": len(answered),
                        "failed": sum(r["status"] != 200 for r in results),
                        "p50_ms": float(np.percentile([r["latency_s"] * 1000 for r in answered], 50)),
                        "p99_ms": _p99([r["latency_s"] for r in answered]),
                        "shadow_dropped": _metric(live.url, "modelcd_shadow_dropped_total", model=sb.name) - dropped_before,
                        "shadow_pairs": _metric(live.url, "modelcd_shadow_pairs_total", model=sb.name) - paired_before,
                    }
                )
                print(f"  phase {i + 1}: {'shadow 0.2' if shadowed else 'no rollout'}: {phases[-1]}", flush=True)
                if shadowed:
                    now = read_state(reg, sb.name)
                    write_state(reg, moved(now, ABORT, policy, "bench: shadow phase over"), now.sequence, key, sb.alias_lock)
    ratios = []
    for k in range(pairs):
        a, b = phases[2 * k], phases[2 * k + 1]
        on, off = (a, b) if a["shadow"] else (b, a)
        ratios.append(on["p99_ms"] / off["p99_ms"])
    return {"phases": phases, "p99_ratios": ratios, "median_p99_ratio": statistics.median(ratios)}


def _metric(url: str, name: str, **labels: str) -> float:
    """The sum of the server's samples called name whose labels include labels."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=5).text
    return sum(
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name and labels.items() <= s.labels.items()
    )


def clean_rollouts(sb, n: int) -> list[dict]:
    """n byte-identical copies rolled out one after another (production restored between them)."""
    out = []
    for i in range(n):
        start = time.perf_counter()
        outcome = roll_out(sb, sb.register(identical(sb.prod, sb.work / f"clean-{i}")))
        sb.restore_production()
        out.append({"outcome": outcome.kind, "detail": outcome.detail, "seconds": round(time.perf_counter() - start, 1)})
        print(f"  clean rollout {i + 1}/{n}: {outcome.kind} ({outcome.detail})", flush=True)
    return out


def detection(sb) -> list[dict]:
    out = []
    for fc in suite_of(sb.task).classes:
        if not fc.live:
            continue
        start = time.perf_counter()
        actual = class_outcome(sb, fc)
        out.append(
            {
                "class": fc.name,
                "expected": str(fc.expected),
                "actual": actual.kind,
                "ok": actual.satisfies(fc.expected),
                "detail": actual.detail,
                "seconds": round(time.perf_counter() - start, 1),
            }
        )
        print(f"  {fc.name}: {actual.kind} ({actual.detail})", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="ticket-intent")
    ap.add_argument("--pairs", type=int, default=3, help="pairs of phases, shadowed and not, in alternating order")
    ap.add_argument("--seconds", type=float, default=15.0, help="seconds of load per phase")
    ap.add_argument("--clean", type=int, default=10, help="clean rollouts, each must reach production")
    ap.add_argument(
        "--step-seconds",
        type=float,
        help="each rollout step's length in the sandbox (default: the fault sandbox's, 10 s; the demo LM needs about 60 s: on 2"
        " cores its 10 s shadow step gathered 3 pairs of the 10 its policy needs)",
    )
    args = ap.parse_args()
    env = apply_local_defaults()
    root = Path(tempfile.mkdtemp(prefix="modelcd-bench-rollout-"))
    print(f"bench rollout of {args.name} in a sandbox under {root}", flush=True)
    started_at = time.time()
    with open_sandbox(args.name, dict(os.environ, **env), root / "sandbox", live_step_seconds=args.step_seconds) as sb:
        if suite_of(sb.task).live_load is None or sb.task not in RESULTS:
            raise SystemExit(f"{args.name} is a {sb.task} model, whose fault suite has no live classes")
        task = sb.task
        cost = shadow_cost(sb, args.pairs, args.seconds, root / "shadow")
        clean = clean_rollouts(sb, args.clean)
        found = detection(sb)
    aborted = sum(c["outcome"] != PROMOTED for c in clean)
    result = {
        "machine": machine(),
        "model": args.name,
        "task": task,
        "step_seconds": args.step_seconds or STEP_SECONDS,
        "seconds": round(time.time() - started_at, 1),
        "shadow_share": SHADOW_SHARE,
        "shadow_cost": cost,
        "clean_rollouts": clean,
        "detection": found,
        "targets": {
            f"production p99 with {SHADOW_SHARE:g} shadowed over none (median of pairs)": {
                "target": TARGETS["shadow_p99_ratio"],
                "measured": round(cost["median_p99_ratio"], 3),
                "met": cost["median_p99_ratio"] <= TARGETS["shadow_p99_ratio"],
            },
            f"clean rollouts not promoted, of {args.clean}": {"target": 0, "measured": aborted, "met": aborted == 0},
            "live-only faults stopped as expected": {
                "target": len(found),
                "measured": sum(d["ok"] for d in found),
                "met": all(d["ok"] for d in found),
            },
        },
    }
    RESULTS[task].write_text(json.dumps(result, indent=1))
    print(json.dumps(result["targets"], indent=1))
    return 0 if all(t["met"] for t in result["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
