"""Wall time the safety and health gates add to a gated run on the demo model.

Run after `make demo`: python bench/bench_gate_overhead.py [--fresh]
Re-registers the production artifact and gates it. With --fresh a line is added to its README,
which changes its content hash and so its build: the run pays for merge, export and quantization
like any new candidate's first gated run. Without it the run reuses the build (the cheapest
gated run there is).
Prints every step's seconds and the share spent on safety and health, and writes them to
bench/results/gate_overhead.json (or gate_overhead_cached.json without --fresh).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import dagster as dg
from machine import machine
from production_artifact import production_copy
from run_steps import step_seconds

from modelcd_assets.gate_results import required_gates
from modelcd_assets.launch import code_location_graph, run_gate

SAFETY_AND_HEALTH_ASSETS = ("candidate", "merged_model")  # the gates on these exist only for safety and health


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="ticket-intent")
    ap.add_argument("--fresh", action="store_true")
    args = ap.parse_args()
    with production_copy(args.name) as found:
        if found is None:
            return 2
        reg, _, artifact = found
        if args.fresh:
            with open(artifact / "README.md", "a") as f:
                f.write(f"\nre-registered by bench_gate_overhead at {time.time()}\n")
        ref = reg.register(artifact, args.name)
        instance = dg.DagsterInstance.get()
        run = run_gate(ref, instance=instance, progress=True)
    steps = step_seconds(instance, run.run_id)
    mat = instance.get_latest_materialization_event(dg.AssetKey("merged_model")).asset_materialization
    health_in_asset = float(mat.metadata["health_seconds"].value)
    total = sum(steps.values())
    gate_steps = [
        f"{k.asset_key.to_user_string()}_{k.name}"
        for k in required_gates(code_location_graph())
        if k.asset_key.to_user_string() in SAFETY_AND_HEALTH_ASSETS
    ]
    gate = sum(steps.get(s, 0.0) for s in gate_steps) + health_in_asset
    for step, seconds in sorted(steps.items(), key=lambda kv: -kv[1]):
        print(f"{seconds:8.2f} s  {step}")
    print(
        f"\n{run.outcome}: {'fresh build' if args.fresh else 'cached build'}; steps {total:.1f} s in all; safety + health {gate:.1f} s "
        f"(health measurement inside merged_model {health_in_asset:.1f} s) = {gate / total:.1%} of the gated run"
    )
    out = Path(__file__).parent / "results" / ("gate_overhead.json" if args.fresh else "gate_overhead_cached.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": machine(),
                "fresh": args.fresh,
                "outcome": run.outcome,
                "steps": steps,
                "total_seconds": total,
                "safety_and_health_seconds": gate,
                "health_in_merged_model_seconds": health_in_asset,
                "share": gate / total,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
