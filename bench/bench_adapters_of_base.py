"""Gating many adapters of one base in a row: what the Nth costs against the first, and registration-to-verdict time.

Run after `make demo`: python bench/bench_adapters_of_base.py [--adapters 10]
A registered model new to this run (ticket-intent-fleet-<time>, with the demo's policy copied to it) gets the demo's
good adapter and copies of it with every LoRA B and the head scaled by 1 + 0.02 k. Each copy's README names this run,
so no build from an earlier run is reused. They are registered and gated one after another in this process, which is
what `modelcd register` then `modelcd gate` do; the registry sensor adds its polling interval on top. The first
adapter pays for the base's INT8 variant decision (both variants built and timed, interleaved); the later ones build
only the chosen variant. Each gated version that passes becomes production, and the next is judged against it.
Writes bench/results/adapters_of_base.json: per adapter, seconds from registration to verdict, the gated run's
step seconds and its outcome.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
from bench_adapter_designs import scaled_adapters
from demo_files import new_demo_model
from machine import machine
from run_steps import step_seconds

from modelcd_assets.launch import run_gate
from modelcd_assets.lib.release.registry import Registry

RESULTS = Path(__file__).parent / "results" / "adapters_of_base.json"
TARGETS = {"nth_over_first": 0.5, "verdict_seconds": 60.0}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--adapters", type=int, default=10)
    args = ap.parse_args()
    made = new_demo_model("fleet")
    if made is None:
        return 2
    name, stamp, found = made
    reg = Registry.from_env()
    instance = dg.DagsterInstance.get()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, folder in enumerate(scaled_adapters(found.adapter, Path(tmp), args.adapters)):
            with open(folder / "README.md", "a") as f:
                f.write(f"\nAdapter {k} of bench_adapters_of_base run {stamp}.\n")
            start = time.perf_counter()
            ref = reg.register(folder, name)
            registered = time.perf_counter()
            run = run_gate(ref, instance=instance)
            verdict = time.perf_counter()
            steps = step_seconds(instance, run.run_id)
            runs.append(
                {
                    "version": ref.version,
                    "outcome": run.outcome,
                    "register_seconds": registered - start,
                    "gate_seconds": verdict - registered,
                    "verdict_seconds": verdict - start,
                    "step_seconds": steps,
                    "failed_gates": [r.gate for r in run.rows if r.status != "pass"],
                    "error": run.error,
                }
            )
            print(
                f"{ref.uri}: {run.outcome} in {verdict - start:.1f} s from registration "
                f"(quantized_model {steps.get('quantized_model', 0):.1f} s)"
                + (f"; not passed: {runs[-1]['failed_gates']}" if runs[-1]["failed_gates"] else ""),
                flush=True,
            )
    first, later = runs[0]["verdict_seconds"], [r["verdict_seconds"] for r in runs[1:]]
    result = {
        "machine": machine(),
        "model": name,
        "adapters": len(runs),
        "targets": TARGETS,
        "runs": runs,
        "first_verdict_seconds": first,
        "later_verdict_seconds_median": statistics.median(later),
        "nth_over_first": statistics.median(later) / first,
        "last_over_first": runs[-1]["verdict_seconds"] / first,
        "later_step_seconds_median": {
            s: statistics.median(r["step_seconds"].get(s, 0.0) for r in runs[1:]) for s in runs[-1]["step_seconds"]
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"\n{len(runs)} adapters of one base on {result['machine']['cpu']}: first {first:.1f} s, later ones {statistics.median(later):.1f}"
        f" s (median) from registration to verdict; Nth / first = {result['nth_over_first']:.2f} (target <= {TARGETS['nth_over_first']})"
    )
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
