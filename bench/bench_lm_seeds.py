"""The seed spread of the causal-LM demo's good recipe, as the perplexity gate measures it: what the demo's tolerance is set from.

    python bench/bench_lm_seeds.py [--work /tmp/bench-lm-seeds]      (make bench-lm-seeds, after make demo)

GOOD_LM is retrained with seed 0 (production's recipe seed) and with seeds 101..110 (the fault sandbox's retrained controls
are 101..), and WORSE_LM once, on from the demo's production adapter, on its chat train split, into --work (an adapter already there is
reused). Each adapter is scored as the gate scores a candidate against production (the demo's production adapter): the
per-reply NLL of the evaluation step, on the demo's INT8 base build, then judge_perplexity under the demo's LM_POLICY.
Writes bench/results/lm_seeds.json.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from machine import machine

RESULTS = Path(__file__).parent / "results" / "lm_seeds.json"
SEEDS = range(101, 111)
SWEEP = (0.03, 0.04, 0.05, 0.06, 0.08, 0.10, 0.15)  # max_relative_increase values re-judged on the same NLLs


def train(base_dir: Path, production: Path, data: Path, work: Path) -> dict[str, tuple[Path, float | None]]:
    """label -> (adapter folder, training seconds or None when reused): seed 0, the retrained seeds, the worse recipe."""
    from modelcd_assets.lib.causal_lm.chats import chat_split, read_chats
    from modelcd_assets.lib.causal_lm.training import train_lm_adapter
    from modelcd_assets.lib.demo.recipes import GOOD_LM, WORSE_LM
    from modelcd_assets.lib.splits import split_path

    chats = read_chats(split_path(data, chat_split("train")))
    base_uri = json.loads((production / "adapter_config.json").read_text())["base_model_name_or_path"]
    recipes = {f"seed {s}": replace(GOOD_LM, seed=s) for s in (0, *SEEDS)} | {"worse": WORSE_LM}
    out = {}
    for label, cfg in recipes.items():
        folder, seconds = work / label.replace(" ", "-"), None
        if not (folder / "adapter_model.safetensors").is_file():
            start = time.perf_counter()
            # The worse recipe goes on from production's adapter, as the demo's worse adapter does.
            train_lm_adapter(
                base_dir, chats, folder, cfg, base_uri, desc=f"training {label}", start_from=production if label == "worse" else None
            )
            seconds = time.perf_counter() - start
        out[label] = (folder, seconds)
    return out


def reply_nll(base_dir: Path, data: Path, home: Path, policy, adapters: dict[str, Path], work: Path) -> dict[str, np.ndarray]:
    """label -> [mean NLL, tokens] per evaluation reply: the evaluation step's scoring, on the demo's INT8 base build (each
    adapter file written in work, never beside the demo's adapters, whose folder hashes the demo registers by)."""
    from modelcd_assets.lib.causal_lm.adapter_file import adapter_parameters, write_adapter_file
    from modelcd_assets.lib.causal_lm.build import BaseBuild, build_base
    from modelcd_assets.lib.causal_lm.chats import chat_split, read_chats
    from modelcd_assets.lib.causal_lm.decoder import Decoder
    from modelcd_assets.lib.hashing import folder_manifest, manifest_hash
    from modelcd_assets.lib.layout import StateLayout
    from modelcd_assets.lib.splits import split_path
    from modelcd_assets.lib.tasks.causal_lm import BASES_CACHE, _mean_nll, _sequences, build_options

    options = build_options(policy)
    build = BaseBuild.for_content(StateLayout(home).cache(BASES_CACHE), manifest_hash(folder_manifest(base_dir)), options)
    build_base(base_dir, build, options)  # made by the demo's gate already; a no-op then
    decoder = Decoder(build.int8)
    items = read_chats(split_path(data, chat_split("evaluation")))[: policy.generation.evaluation_replies]
    sequences = _sequences(decoder, items)
    out = {}
    for label, folder in adapters.items():
        params, fit = adapter_parameters(folder, build.slots())
        if not params:
            raise SystemExit(f"{folder} does not fit the base's slots: {fit.problems}")
        path = write_adapter_file(params, work / f"{label.replace(' ', '-')}.onnx_adapter")
        decoder.load_adapter(path, label)
        out[label] = np.asarray([_mean_nll(s, ids[start:]) for s, (ids, start) in zip(decoder.reply_logits(sequences, label), sequences)])
        decoder.unload_adapter(label)
    return out


def judged(cand: np.ndarray, prod: np.ndarray, perplexity_policy) -> dict:
    from modelcd_assets.lib.judging.gates import judge_perplexity

    v = judge_perplexity(cand[:, 0], prod[:, 0], cand[:, 1], perplexity_policy)
    n = v.numbers
    return {
        "relative_change": n["relative_change"],
        "median_reply_change": n["median_reply_change"],
        "p_worse": n["p_worse"],
        "ci": [n["ci_low"], n["ci_high"]],
        "perplexity": n["candidate_perplexity"],
        "status": v.status,
        "reason": v.reason,
    }


def spread(values: list[float]) -> dict:
    return {
        "min": min(values),
        "p10": float(np.percentile(values, 10)),
        "median": float(np.median(values)),
        "p90": float(np.percentile(values, 90)),
        "max": max(values),
        "mean": float(np.mean(values)),
        "std": float(np.std(values, ddof=1)),
    }


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-lm-seeds"), help="where the adapters are trained (never committed)")
    args = parser.parse_args()
    import yaml

    from modelcd_assets.demo.causal_lm import LM_POLICY
    from modelcd_assets.lib.demo.bases import lm_base_dir
    from modelcd_assets.lib.judging.gates import FAIL
    from modelcd_assets.lib.judging.policy import Policy
    from modelcd_assets.lib.operations.settings import apply_local_defaults

    env = apply_local_defaults()
    home, data = Path(env["MODELCD_HOME"]), Path(env["MODELCD_DATA"])
    base_dir, production = lm_base_dir(home), home / "work" / "lm_adapters" / "good"
    if not (production / "adapter_model.safetensors").is_file():
        print("the demo's good reply adapter is missing; run 'make demo' first", file=sys.stderr)
        return 2
    policy = Policy.model_validate(yaml.safe_load(LM_POLICY))
    tol = policy.perplexity.max_relative_increase
    started, load_before = time.perf_counter(), os.getloadavg()
    trained = train(base_dir, production, data, args.work)
    train_done = time.perf_counter()
    nll = reply_nll(base_dir, data, home, policy, {"production": production} | {k: f for k, (f, _) in trained.items()}, args.work)
    prod = nll.pop("production")
    rows = {label: judged(cand, prod, policy.perplexity) | {"train_seconds": trained[label][1]} for label, cand in nll.items()}
    same = {
        label: all(
            filecmp.cmp(trained[label][0] / f, demo / f, shallow=False) for f in ("adapter_model.safetensors", "adapter_config.json")
        )
        for label, demo in (("seed 0", production), ("worse", home / "work" / "lm_adapters" / "worse"))
    }
    seeds = [rows[f"seed {s}"] for s in SEEDS]
    med, pooled = [r["median_reply_change"] for r in seeds], [r["relative_change"] for r in seeds]
    worse = rows["worse"]
    at = lambda t: policy.perplexity.model_copy(update={"max_relative_increase": t})  # noqa: E731
    sweep = {
        f"{t:g}": {
            "retrained_passed": sum(judged(nll[f"seed {s}"], prod, at(t))["status"] != FAIL for s in SEEDS),
            "worse": judged(nll["worse"], prod, at(t))["status"],
        }
        for t in SWEEP
    }
    targets = {
        "tolerance_above_every_seed_median_reply": {
            "target": f"the demo's max_relative_increase ({tol:g}) is above every retrained seed's median reply change",
            "measured": max(med),
            "met": max(med) < tol,
        },
        "tolerance_above_every_seed_pooled": {
            "target": f"the demo's max_relative_increase ({tol:g}) is above every retrained seed's pooled change",
            "measured": max(pooled),
            "met": max(pooled) < tol,
        },
        "every_seed_passes": {
            "target": f"perplexity_within_tolerance passes all {len(seeds)} retrained seeds",
            "measured": sum(r["status"] != FAIL for r in seeds),
            "met": all(r["status"] != FAIL for r in seeds),
        },
        "worse_above_tolerance": {
            "target": f"the worse adapter's pooled change stays above the demo's max_relative_increase ({tol:g})",
            "measured": worse["relative_change"],
            "met": worse["relative_change"] > tol,
        },
        "worse_blocked": {
            "target": "perplexity_within_tolerance blocks the worse adapter",
            "measured": worse["status"],
            "met": worse["status"] == FAIL,
        },
    }
    result = {
        "command": "python " + " ".join(sys.argv),
        "machine": machine(),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "production": str(production),
        "policy": policy.perplexity.model_dump(),
        "evaluation_replies": policy.generation.evaluation_replies,
        "tokens": int(prod[:, 1].sum()),
        "production_perplexity": float(np.exp(np.sum(prod[:, 0] * prod[:, 1]) / prod[:, 1].sum())),
        "seed_0_is_production_byte_for_byte": same["seed 0"],
        "worse_is_demo_worse_byte_for_byte": same["worse"],
        "rows": rows,
        "retrained_seeds": list(SEEDS),
        "summary": {
            "median_reply_change": spread(med),
            "relative_change": spread(pooled),
            "significant": sum(r["p_worse"] < policy.perplexity.alpha for r in seeds),
        },
        "worse": worse,
        "tolerance_sweep": sweep,
        "targets": targets,
        "seconds": {"training": train_done - started, "scoring": time.perf_counter() - train_done},
        "load_average": {"before": load_before, "after": os.getloadavg()},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    print(f"{'adapter':<9} {'pooled':>8} {'median':>8} {'p_worse':>9}  verdict (max_relative_increase {tol:g})")
    for label, r in rows.items():
        print(f"{label:<9} {r['relative_change']:>+8.2%} {r['median_reply_change']:>+8.2%} {r['p_worse']:>9.3g}  {r['status']}")
    print(
        f"seed 0 is production byte for byte: {same['seed 0']}; retrained median reply change max {max(med):+.2%}, pooled max"
        f" {max(pooled):+.2%}"
    )
    print("sweep: " + ", ".join(f"{t}: {s['retrained_passed']}/{len(seeds)} pass, worse {s['worse']}" for t, s in sweep.items()))
    print(f"wrote {RESULTS} ({result['seconds']['training']:.0f} s training, {result['seconds']['scoring']:.0f} s scoring)")
    return 0 if all(t["met"] for t in targets.values()) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
