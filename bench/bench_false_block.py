"""False-block rate: a byte-identical re-registration of production must pass every gate, every time.

Run after `make demo`: python bench/bench_false_block.py [--runs 20]
Each run registers the production artifact again as a new version and runs the full gated job
on this machine, so throughput noise, bootstrap and drift are all exercised for real.
Writes every run's gate table to bench/results/false_block.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from machine import machine
from production_artifact import production_copy

from modelcd_assets.launch import PROMOTED, run_gate

RESULTS = Path(__file__).parent / "results" / "false_block.json"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--name", default="ticket-intent")
    args = ap.parse_args()
    with production_copy(args.name) as found:
        if found is None:
            return 2
        reg, prod, artifact = found
        outcomes, failures, runs = Counter(), Counter(), []
        started = time.perf_counter()
        for i in range(args.runs):
            ref = reg.register(artifact, args.name)
            t = time.perf_counter()
            run = run_gate(ref)
            runs.append(
                {
                    "version": ref.version,
                    "outcome": run.outcome,
                    "seconds": time.perf_counter() - t,
                    "gates": [{"gate": r.gate, "status": r.status, "measured": r.measured, "threshold": r.threshold} for r in run.rows],
                }
            )
            outcomes[run.outcome] += 1
            for row in run.rows:
                if row.status != "pass":
                    failures[f"{row.gate}={row.status}"] += 1
            tp = next(r for r in run.rows if r.gate == "throughput_within_tolerance")
            print(f"run {i + 1}/{args.runs}: {ref.uri} {run.outcome}; throughput {tp.measured}", flush=True)
    elapsed = time.perf_counter() - started
    print()
    print(
        f"byte-identical re-registrations of {prod.uri}: {outcomes[PROMOTED]}/{args.runs} passed every gate "
        f"({elapsed / args.runs:.0f} s per gated run)"
    )
    print(f"gate failures: {dict(failures) or 'none'}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "machine": machine(),
                "production": prod.uri,
                "runs": runs,
                "passed": outcomes[PROMOTED],
                "failures": dict(failures),
                "seconds_per_run": elapsed / args.runs,
            },
            indent=2,
            default=str,
        )
        + "\n"
    )
    print(f"wrote {RESULTS}")
    return 0 if outcomes[PROMOTED] == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
