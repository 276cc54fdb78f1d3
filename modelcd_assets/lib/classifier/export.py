"""FP32 ONNX export of a sequence classifier, with a parity check against torch."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch

from modelcd_assets.lib.classifier.model_io import load_classifier, load_tokenizer
from modelcd_assets.lib.errors import BadCandidate
from modelcd_assets.lib.inference.tokens import INPUT_NAMES

OPSET = 17


def export_onnx(model_dir: Path, out_path: Path) -> Path:
    """Export model_dir to ONNX with dynamic batch and sequence axes."""
    model = load_classifier(model_dir, eager_attention=True)
    tok = load_tokenizer(model_dir)
    enc = tok(["a probe sentence for tracing", "another"], padding="max_length", max_length=16, return_tensors="pt")
    inputs = tuple(enc[name] for name in INPUT_NAMES)
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES} | {"logits": {0: "batch"}}
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_suffix(".tmp.onnx")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        # The TorchScript exporter yields the op pattern that ORT's BERT fusions recognise.
        torch.onnx.export(
            model,
            inputs,
            str(tmp),
            input_names=list(INPUT_NAMES),
            output_names=["logits"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    tmp.rename(out_path)
    return out_path


def torch_logits(model_dir: Path, feeds: dict[str, np.ndarray], batch_size: int = 64) -> np.ndarray:
    """Logits from the torch model on already tokenized inputs."""
    model = load_classifier(model_dir)
    outs = []
    with torch.inference_mode():
        for i in range(0, len(feeds["input_ids"]), batch_size):
            batch = {k: torch.from_numpy(v[i : i + batch_size]) for k, v in feeds.items()}
            outs.append(model(**batch).logits.float().numpy())
    return np.concatenate(outs)


def check_parity(torch_out: np.ndarray, onnx_out: np.ndarray, atol: float = 1e-4) -> float:
    """Max |logit difference| between torch and ONNX; raises when above atol."""
    diff = float(np.max(np.abs(torch_out - onnx_out)))
    if not np.isfinite(diff) or diff > atol:
        raise BadCandidate(f"ONNX export disagrees with torch: max |logit diff| {diff:.2e} > {atol:.0e}; the export is not trustworthy")
    return diff
