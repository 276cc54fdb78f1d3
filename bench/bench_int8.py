"""Runtimes and input handling on MiniLM, side by side in one run: PyTorch eager, ORT FP32, ORT INT8 static and dynamic.

Run after `make demo` (it uses the demo's good adapter, merged into MiniLM):
    python bench/bench_int8.py [--rounds 5] [--texts 256]      (make bench)
For each runtime, items/s over the same evaluation texts under three ways of feeding them:
  - one text per call, no padding (what a hand-written server does);
  - batches of 32 padded to 128 tokens (fixed shapes);
  - length buckets of 32 (lib/inference/tokens.buckets: sorted by length, each batch padded to its own longest text), which
    modelcd's gates and server use; a batch-dependent model (dynamic INT8) is run one text per call there
    (lib/inference/runtime.OnnxModel), so this row equals the first for it.
Every cell is timed in interleaved rounds (each cell once per round, in rotating order); the median is kept.
Accuracy and top-1 agreement with ORT FP32 are measured on the whole evaluation split for every runtime.
Writes bench/results/int8.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from demo_files import demo_files
from machine import machine

from modelcd_assets.lib.classifier.config import labels_of
from modelcd_assets.lib.classifier.export import export_onnx
from modelcd_assets.lib.classifier.model_io import load_classifier, merge_adapter
from modelcd_assets.lib.inference.evaluate import label_ids
from modelcd_assets.lib.inference.quantize import optimize_transformer, quantize_dynamic_int8, quantize_static_int8
from modelcd_assets.lib.inference.runtime import OnnxModel, feeds_for, logits
from modelcd_assets.lib.inference.tokens import BATCH, MAX_LENGTH, TextEncoder, buckets
from modelcd_assets.lib.splits import read_split, split_path

RESULTS = Path(__file__).parent / "results" / "int8.json"
FEEDING = {
    "one text per call, no padding": "single",
    f"batches of {BATCH} padded to {MAX_LENGTH}": "fixed",
    f"length buckets of {BATCH} (modelcd)": "buckets",
}


def batches(enc: TextEncoder, texts: list[str], how: str, limit: int) -> list[dict[str, np.ndarray]]:
    if how == "single":
        return [enc.encode([t]) for t in texts]
    if how == "fixed":
        return [enc.encode(texts[i : i + BATCH], pad_to=MAX_LENGTH) for i in range(0, len(texts), BATCH)]
    return [b for _, b in buckets(enc.encode(texts), min(BATCH, limit))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--texts", type=int, default=256, help="evaluation texts timed per cell")
    args = ap.parse_args()
    found = demo_files()
    if found is None:
        return 2
    data, base, adapter = found.data, found.base, found.adapter
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        merged = tmp / "merged"
        merge_adapter(base, adapter, merged)
        fp32 = export_onnx(merged, tmp / "model.onnx")
        fused = optimize_transformer(fp32, tmp / "opt.onnx", merged / "config.json")
        enc = TextEncoder(merged)
        calib = enc.encode([e.text for e in read_split(split_path(data, "calibration"))])
        paths = {
            "ORT FP32": fp32,
            "ORT INT8 static": quantize_static_int8(tmp / "opt.onnx", tmp / "static.onnx", calib),
            "ORT INT8 dynamic": quantize_dynamic_int8(tmp / "opt.onnx", tmp / "dynamic.onnx"),
        }
        evaluation = read_split(split_path(data, "evaluation"))
        eval_feeds = enc.encode([e.text for e in evaluation])
        truth = label_ids([e.label for e in evaluation], labels_of(merged))
        models = {name: OnnxModel(p) for name, p in paths.items()}
        model = load_classifier(merged)  # default attention implementation, as a user would run it
        with torch.inference_mode():
            eager_logits = _eager_all(model, eval_feeds)
        # Does a text's output depend on what it is batched with? Alone against in length buckets, same session.
        sample = {k: v[:256] for k, v in eval_feeds.items()}
        dependence = {
            name: float(np.max(np.abs(logits(m.session, sample, 1) - logits(m.session, sample, BATCH)))) for name, m in models.items()
        }
        preds = {"PyTorch eager FP32": eager_logits.argmax(1)} | {name: m.logits(eval_feeds).argmax(1) for name, m in models.items()}

        texts = [e.text for e in evaluation[: args.texts]]
        lengths = enc.lengths(texts)
        runners = {}
        for how in FEEDING.values():
            torch_in = [{k: torch.from_numpy(v) for k, v in b.items()} for b in batches(enc, texts, how, BATCH)]
            runners[("PyTorch eager FP32", how)] = lambda ins=torch_in: [model(**b) for b in ins]
            for name, m in models.items():
                ins = [feeds_for(m.session, b) for b in batches(enc, texts, how, m.batch(BATCH))]
                runners[(name, how)] = lambda s=m.session, ins=ins: [s.run(["logits"], b) for b in ins]
        times = {key: [] for key in runners}
        keys = list(runners)
        with torch.inference_mode():
            for fn in runners.values():
                fn()
            for r in range(args.rounds):
                for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
                    t = time.perf_counter()
                    runners[key]()
                    times[key].append(time.perf_counter() - t)

    rows = []
    eager_single = len(texts) / statistics.median(times[("PyTorch eager FP32", "single")])
    for (name, how), ts in times.items():
        items = len(texts) / statistics.median(ts)
        acc = float(np.mean(preds[name] == truth))
        rows.append(
            {
                "runtime": name,
                "feeding": next(k for k, v in FEEDING.items() if v == how),
                "items_per_s": items,
                "ratio_vs_eager_one_at_a_time": items / eager_single,
                "accuracy": acc,
                "accuracy_vs_ort_fp32": acc / float(np.mean(preds["ORT FP32"] == truth)),
                "top1_agreement_vs_ort_fp32": float(np.mean(preds[name] == preds["ORT FP32"])),
            }
        )
    result = {
        "machine": machine(),
        "torch_threads": torch.get_num_threads(),
        "rounds": args.rounds,
        "texts": len(texts),
        "median_tokens": float(np.median(lengths)),
        "max_tokens": int(lengths.max()),
        "evaluation_texts": len(evaluation),
        "fused_ops": fused,
        "bucket": BATCH,
        "batch_dependence_max_abs_logit_diff": dependence,
        "rows": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"MiniLM-L6 + LoRA (merged) on {result['machine']['cpu']}, {len(texts)} evaluation texts (median {result['median_tokens']:.0f}"
        f" tokens, max {result['max_tokens']}), {args.rounds} interleaved rounds"
    )
    for r in rows:
        print(
            f"{r['runtime']:20} {r['feeding']:34} {r['items_per_s']:8.0f} items/s  x{r['ratio_vs_eager_one_at_a_time']:5.2f}  "
            f"accuracy {r['accuracy']:.2%} ({r['accuracy_vs_ort_fp32']:.4f} of ORT FP32)"
        )
    print(f"wrote {RESULTS}")
    return 0


def _eager_all(model, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """PyTorch eager logits of every row, in length buckets (padding does not change an FP32 model's outputs)."""
    out = np.empty((len(feeds["input_ids"]), model.config.num_labels), dtype=np.float32)
    for rows, b in buckets(feeds, BATCH):
        out[rows] = model(**{k: torch.from_numpy(v) for k, v in b.items()}).logits.numpy()
    return out


if __name__ == "__main__":
    sys.exit(main())
