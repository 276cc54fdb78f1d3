"""INT8 vs FP32 vs PyTorch eager on MiniLM, measured side by side in one run.

Run after `make demo` (it uses the demo's good adapter, merged into MiniLM):
    python bench/bench_int8.py [--rounds 7]
Prints, at sequence length 128 and batch 1 and 32, each variant's throughput / PyTorch eager
FP32 throughput, and INT8 / FP32 accuracy on the evaluation split. Variants are timed in
interleaved rounds (every variant once per round, in rotating order) and the median is reported.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from modelcd_assets.lib.data import read_split
from modelcd_assets.lib.evaluate import label_ids, predict
from modelcd_assets.lib.export import export_onnx
from modelcd_assets.lib.model_io import labels_of, load_classifier, merge_adapter
from modelcd_assets.lib.quantize import optimize_transformer, quantize_dynamic_int8, quantize_static_int8
from modelcd_assets.lib.runtime import feeds_for, session
from modelcd_assets.lib.settings import apply_local_defaults
from modelcd_assets.lib.tokens import encode

SEQ = 128


def timed(fn, calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    env = apply_local_defaults()
    home = Path(env["MODELCD_HOME"])
    base, adapter = home / "work" / "base", home / "work" / "adapters" / "good"
    if not (adapter / "adapter_model.safetensors").is_file():
        print("the demo's good adapter is missing; run 'make demo' first", file=sys.stderr)
        return 2
    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        merged = tmp / "merged"
        merge_adapter(base, adapter, merged)
        fp32 = export_onnx(merged, tmp / "model.onnx")
        fused = optimize_transformer(fp32, tmp / "opt.onnx", merged / "config.json")
        calib = encode(merged, [e.text for e in read_split(Path(env["MODELCD_DATA"]) / "calibration.jsonl")])
        paths = {
            "ORT FP32": fp32,
            "ORT INT8 static": quantize_static_int8(tmp / "opt.onnx", tmp / "static.onnx", calib),
            "ORT INT8 dynamic": quantize_dynamic_int8(tmp / "opt.onnx", tmp / "dynamic.onnx"),
        }
        evaluation = read_split(Path(env["MODELCD_DATA"]) / "evaluation.jsonl")
        eval_feeds = encode(merged, [e.text for e in evaluation])
        truth = label_ids([e.label for e in evaluation], labels_of(merged))
        preds = {name: predict(p, eval_feeds) for name, p in paths.items()}
        accuracy = {name: float(np.mean(p == truth)) for name, p in preds.items()}

        model = load_classifier(merged)  # default attention implementation, as a user would run it
        sessions = {name: session(p) for name, p in paths.items()}
        texts = [e.text for e in evaluation[:32]]
        results = {}
        for batch in (1, 32):
            feeds = encode(merged, (texts * 32)[:batch], pad_to=SEQ)
            tfeeds = {k: torch.from_numpy(v) for k, v in feeds.items()}
            calls = 20 if batch == 1 else 2
            runners = {"PyTorch eager FP32": lambda: model(**tfeeds)}
            runners |= {name: (lambda s=s: s.run(["logits"], feeds_for(s, feeds))) for name, s in sessions.items()}
            times = {name: [] for name in runners}
            with torch.inference_mode():
                for fn in runners.values():
                    fn()
                for r in range(args.rounds):
                    names = list(runners)
                    names = names[r % len(names):] + names[: r % len(names)]
                    for name in names:
                        times[name].append(timed(runners[name], calls))
            results[batch] = {name: float(np.median(t)) for name, t in times.items()}

    print(f"MiniLM-L6 + LoRA (merged), seq {SEQ}, {threads} threads, {os.cpu_count()} cores, {args.rounds} interleaved rounds")
    print(f"fused ops: {fused}")
    print()
    print(f"{'variant':22} {'b1 ms':>8} {'b1 ratio':>9} {'b32 ms':>8} {'b32 ratio':>10} {'accuracy':>9} {'acc/FP32':>9} {'agree':>7}")
    ref1, ref32 = results[1]["PyTorch eager FP32"], results[32]["PyTorch eager FP32"]
    for name in results[1]:
        acc = accuracy.get(name, accuracy["ORT FP32"])
        agree = float(np.mean(preds[name] == preds["ORT FP32"])) if name in preds else 1.0
        print(f"{name:22} {1000 * results[1][name]:8.2f} {ref1 / results[1][name]:8.2f}x {1000 * results[32][name]:8.1f} "
              f"{ref32 / results[32][name]:9.2f}x {acc:9.2%} {acc / accuracy['ORT FP32']:9.4f} {agree:7.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
