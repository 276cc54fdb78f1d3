"""Recalibration without retraining: a poor and a good calibration set, each turned into a gated calibration revision.

Run after `make demo` (for MiniLM's trained adapter): python bench/bench_recalibration.py
For each model (the tiny test model, built here from a config and trained in seconds, and MiniLM with the demo's good
adapter), a fresh state folder: the adapter is registered and gated into production with the policy pinned to static
INT8, calibrated with the data folder's split. Then `modelcd calibrate` (launch.run_calibration) registers two sets in
turn, and each one's calibration revision is gated against production:
  - poor: 300 short, unrepresentative texts ("thanks" repeated 5 to 9 times; median 9 tokens, the tickets' 18);
  - good: 300 fresh tickets from the evaluation split's generator (another seed, less those that are in the split).
Writes bench/results/recalibration.json: per set, the revision's outcome, its INT8 agreement with FP32, accuracy
and throughput verdicts against production, and the seconds from `calibrate` to the verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from modelcd_assets.lib.judging.policy import policy_path

RESULTS = Path(__file__).parent / "results" / "recalibration.json"
MODEL = "recal"
POLICIES = {
    # The test suite's policy for the tiny model (it reaches about 89%, so its floor is lower).
    "tiny": "accuracy:\n  absolute_floor: 0.6\nquantization:\n  variant: static\nthroughput:\n  p99_slo_ms: 250\n  on_inconclusive: pass\n",
    # The demo's thresholds, with static INT8 pinned so each calibration set is what is judged.
    "minilm": "quantization:\n  variant: static\n",
}
GATES = ("int8_agrees_with_fp32", "accuracy_within_tolerance", "throughput_within_tolerance")


def poor_texts() -> list[str]:
    rng = np.random.default_rng(0)
    return [" ".join(["thanks"] * int(k)) for k in rng.integers(5, 10, size=300)]


def good_texts(evaluation: set[str]) -> list[str]:
    from modelcd_assets.lib.demo.tickets import generate

    return [ex.text for ex in generate(400, 7) if ex.text not in evaluation][:300]


def models(which: str, work: Path) -> tuple[Path, Path, str]:
    """(base folder, adapter folder, base registry name) for the tiny model or MiniLM."""
    if which == "tiny":
        from modelcd_assets.lib.classifier.base_model import build_tiny_base
        from modelcd_assets.lib.classifier.training import Training, train_adapter, train_classifier
        from modelcd_assets.lib.demo.tickets import LABELS, generate

        base = train_classifier(
            build_tiny_base(work / "random", list(LABELS)),
            generate(3000, 1),
            work / "trained",
            Training(steps=150, learning_rate=3e-3),
            desc="tiny",
        )
        adapter = train_adapter(
            base, generate(3000, 1), work / "good", Training(steps=10, learning_rate=1e-4, rank=4, alpha=8, seed=3), "models:/tiny-base/1"
        )
        return base, adapter, "tiny-base"
    from modelcd_assets.demo.classifier import BASE_NAME

    demo = Path(os.environ.get("MODELCD_HOME", ".modelcd")).resolve() / "work"
    if not (demo / "adapters" / "good" / "adapter_model.safetensors").is_file():
        raise SystemExit(f"the demo's good adapter is missing under {demo}; run 'make demo' first")
    return demo / "base", demo / "adapters" / "good", BASE_NAME


def scenario(which: str) -> dict:
    """One model, in a fresh state folder (removed afterwards): production, then a poor and a good calibration set."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-recal-{which}-"))
    try:
        return _scenario(which, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _scenario(which: str, work: Path) -> dict:
    base, adapter, base_name = models(which, work / "models")
    from modelcd_assets.lib.operations.settings import local_defaults

    os.environ.update(local_defaults(work / "home"))
    import dagster as dg

    from modelcd_assets.launch import PROMOTED, run_calibration, run_gate
    from modelcd_assets.lib.demo.tickets import write_splits
    from modelcd_assets.lib.operations.settings import apply_local_defaults
    from modelcd_assets.lib.release.candidate import CandidateRecord
    from modelcd_assets.lib.release.registry import CandidateRef, Registry
    from modelcd_assets.lib.release.signing import init_keys
    from modelcd_assets.lib.splits import read_split

    env = apply_local_defaults()
    data = write_splits(Path(env["MODELCD_DATA"]))
    policy_path(Path(env["MODELCD_POLICY_DIR"]), MODEL).write_text(POLICIES[which])
    reg = Registry.from_env()
    if not reg.keys.private.exists():  # a fresh state folder signs with a key pair of its own, as 'modelcd keys init' makes it
        init_keys(reg.keys)
    reg.register(base, base_name, role="base")
    instance = dg.DagsterInstance.get()
    first = run_gate(reg.register(adapter, MODEL), instance=instance)
    if first.outcome != PROMOTED:
        raise SystemExit(f"{which}: the adapter was not promoted ({first.error}); nothing to recalibrate")
    record = lambda version: CandidateRecord.of(Path(env["MODELCD_HOME"]), CandidateRef(MODEL, version))  # noqa: E731
    agreement = lambda version: json.loads(record(version).quantization_report.read_text())["variants"]["static"]["top1_agreement"]  # noqa: E731
    from modelcd_assets.lib.inference.tokens import TextEncoder
    from modelcd_assets.lib.release.calibration import read_texts

    lengths = TextEncoder(record(first.ref.version).build.merged).lengths
    split = read_texts(data["calibration"])
    out = {
        "production": {
            "version": first.ref.version,
            "static_top1_agreement": agreement(first.ref.version),
            "examples": len(split),
            "median_tokens": float(np.median(lengths(split))),
        },
        "sets": {},
    }
    evaluation = {ex.text for ex in read_split(data["evaluation"])}
    for name, texts in (("poor", poor_texts()), ("good", good_texts(evaluation))):
        path = work / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        start = time.perf_counter()
        done = run_calibration(MODEL, path, instance=instance)
        seconds = time.perf_counter() - start
        if done.refused or done.gate is None:
            raise SystemExit(f"{which}: the {name} set was not gated: {done.refused or done.why}")
        rows = {r.gate: {"status": r.status, "measured": r.measured, "threshold": r.threshold} for r in done.gate.rows if r.gate in GATES}
        out["sets"][name] = {
            "examples": done.summary["examples"],
            "median_tokens": done.summary["median_tokens"],
            "evaluation_median_tokens": done.summary["evaluation_median_tokens"],
            "revision": done.revision.version,
            "outcome": done.gate.outcome,
            "static_top1_agreement": agreement(done.revision.version),
            "gates": rows,
            "seconds_to_verdict": seconds,
            "production_after": reg.production(MODEL).version,
        }
        print(
            f"{which} {name}: revision {done.revision.version} {done.gate.outcome} in {seconds:.1f} s; "
            + "; ".join(f"{g} {v['status']} ({v['measured']})" for g, v in rows.items()),
            flush=True,
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["tiny", "minilm"], help="run one model here (the default runs both, each in its own process)")
    args = ap.parse_args()
    if args.model:
        Path(os.environ["BENCH_RECAL_OUT"]).write_text(json.dumps(scenario(args.model)))
        return 0
    sys.path.insert(0, str(Path(__file__).parent))
    from machine import machine

    result = {"machine": machine(), "models": {}}
    for which in ("tiny", "minilm"):
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            subprocess.run([sys.executable, __file__, "--model", which], check=True, env={**os.environ, "BENCH_RECAL_OUT": f.name})
            result["models"][which] = json.loads(Path(f.name).read_text())
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
