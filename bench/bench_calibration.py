"""How far can a bad calibration split push static INT8 away from FP32? Measured on the demo's good adapter.

Run after `make demo`:
    python bench/bench_calibration.py
Quantizes the merged, fused model statically (QDQ, MinMax, as quantized_model does) once per
calibration split below, and prints each one's top-1 agreement with FP32 and its largest logit
difference on the evaluation split. Writes bench/results/calibration.json.

The fault sandbox's static_calibration_collapse class uses the first split; this bench shows
whether it actually collapses INT8 on the model at hand.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from demo_files import demo_files
from machine import machine

from modelcd_assets.faults.conditions import COLLAPSING_CALIBRATION
from modelcd_assets.lib.classifier.export import export_onnx
from modelcd_assets.lib.classifier.model_io import merge_adapter
from modelcd_assets.lib.inference.quantize import optimize_transformer, quantize_static_int8
from modelcd_assets.lib.inference.runtime import logits, session
from modelcd_assets.lib.inference.tokens import encode
from modelcd_assets.lib.splits import read_split, split_path

RESULTS = Path(__file__).parent / "results" / "calibration.json"


def splits(calibration: list[str]) -> dict[str, list[str]]:
    repeated = lambda token, n=130: [" ".join([token] * n)]  # noqa: E731  (cut at the model's maximum length)
    return {
        "one-word tickets (the fault sandbox's)": COLLAPSING_CALIBRATION,
        "one word": ["ok"],
        "empty text": [""],
        "128 x '!'": repeated("!"),
        "128 x an unknown symbol": repeated("\u2603"),
        "128 numbers": [" ".join(str(i) for i in range(1000, 1130))],
        "128 x [SEP]": repeated("[SEP]"),
        "128 x [MASK]": repeated("[MASK]"),
        "128 x [PAD], attended": repeated("[PAD]"),
        "128 x [CLS]": repeated("[CLS]"),
        "the calibration split (reference)": calibration,
    }


def main() -> int:
    found = demo_files()
    if found is None:
        return 2
    data, base, adapter = found.data, found.base, found.adapter
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        merged = tmp / "merged"
        merge_adapter(base, adapter, merged)
        export_onnx(merged, tmp / "model.onnx")
        optimize_transformer(tmp / "model.onnx", tmp / "opt.onnx", merged / "config.json")
        feeds = encode(merged, [e.text for e in read_split(split_path(data, "evaluation"))])
        fp32 = logits(session(tmp / "opt.onnx"), feeds)
        for name, texts in splits([e.text for e in read_split(split_path(data, "calibration"))]).items():
            out = quantize_static_int8(tmp / "opt.onnx", tmp / "static.onnx", encode(merged, texts))
            int8 = logits(session(out), feeds)
            rows.append(
                {
                    "calibration": name,
                    "texts": len(texts),
                    "top1_agreement": float(np.mean(int8.argmax(1) == fp32.argmax(1))),
                    "max_abs_logit_diff": float(np.max(np.abs(int8 - fp32))),
                }
            )
            print(f"{name:40} {rows[-1]['top1_agreement']:8.2%}  max |dlogit| {rows[-1]['max_abs_logit_diff']:.3f}", flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "model": "all-MiniLM-L6-v2 + the demo's good adapter (merged, fused)",
                "evaluation_texts": len(fp32),
                **machine(),
                "results": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
