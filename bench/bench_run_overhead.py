"""Dagster's share of a gated run: wall time over the sum of its steps, multiprocess executor against in-process.

Run after `make demo`: python bench/bench_run_overhead.py
A registered model new to this run (ticket-intent-overhead-<time>, the demo's policy) gets the demo's good adapter,
gated in this process first so its INT8 variant is decided; then two copies of it with LoRA B and the head scaled
(new content, so nothing is reused), each gated by `dagster job execute` as the daemon's run worker executes a run,
one with the multiprocess executor (a subprocess per step) and one in process, in alternating order over --rounds.
Wall time is the run's start to end as Dagster recorded it; step time is the sum of its steps' durations.
Writes bench/results/run_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
import yaml
from bench_adapter_designs import scaled_adapters
from demo_files import new_demo_model
from machine import machine
from run_steps import step_seconds

from modelcd_assets.defs.jobs import GATE_JOB
from modelcd_assets.launch import add_candidate, run_gate
from modelcd_assets.lib.release.registry import Registry

RESULTS = Path(__file__).parent / "results" / "run_overhead.json"
TARGET = 1.2
EXECUTORS = {"multiprocess": {"multiprocess": {}}, "in_process": {"in_process": {}}}


def execute(key: str, executor: str, work: Path, instance: dg.DagsterInstance) -> dict:
    """One gated run through `dagster job execute` (a run worker's code path); its wall and step seconds."""
    config = work / f"{executor}.yaml"
    config.write_text(yaml.safe_dump({"execution": {"config": EXECUTORS[executor]}}))
    tag = f"{key}-{executor}-{time.time_ns()}"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "dagster",
            "job",
            "execute",
            "-m",
            "modelcd_assets.definitions",
            "-j",
            GATE_JOB,
            "-c",
            str(config),
            "--tags",
            json.dumps({"dagster/partition": key, "modelcd/bench": tag}),
        ],
        check=True,
        capture_output=True,
    )
    run = instance.get_runs(filters=dg.RunsFilter(tags={"modelcd/bench": tag}))[0]
    stats = instance.get_run_stats(run.run_id)
    steps = step_seconds(instance, run.run_id)
    wall = stats.end_time - stats.start_time
    return {
        "executor": executor,
        "candidate": key,
        "status": run.status.value,
        "wall_seconds": wall,
        "step_seconds_sum": sum(steps.values()),
        "wall_over_steps": wall / sum(steps.values()),
        "steps": len(steps),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    made = new_demo_model("overhead")
    if made is None:
        return 2
    name, stamp, found = made
    reg = Registry.from_env()
    instance = dg.DagsterInstance.get()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        folders = scaled_adapters(found.adapter, tmp / "adapters", 1 + 2 * args.rounds)
        for k, folder in enumerate(folders):
            with open(folder / "README.md", "a") as f:
                f.write(f"\nAdapter {k} of bench_run_overhead run {stamp}.\n")
        first = run_gate(reg.register(folders[0], name), instance=instance)  # decides the base's variant; not measured
        print(f"first adapter: {first.outcome}", flush=True)
        for r in range(args.rounds):
            order = ("multiprocess", "in_process") if r % 2 == 0 else ("in_process", "multiprocess")
            for i, executor in enumerate(order):
                ref = reg.register(folders[1 + 2 * r + i], name)
                add_candidate(instance, ref)
                runs.append(execute(ref.key, executor, tmp, instance))
                print(
                    f"{ref.key} {executor}: {runs[-1]['status']}, wall {runs[-1]['wall_seconds']:.1f} s over steps "
                    f"{runs[-1]['step_seconds_sum']:.1f} s = {runs[-1]['wall_over_steps']:.2f}",
                    flush=True,
                )
    summary = {e: statistics.median(r["wall_over_steps"] for r in runs if r["executor"] == e) for e in EXECUTORS}
    result = {"machine": machine(), "model": name, "target": TARGET, "runs": runs, "wall_over_steps_median": summary}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wall / steps: {summary}; wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
