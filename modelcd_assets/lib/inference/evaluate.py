"""Predictions and accuracy of ONNX models on tokenized splits."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from modelcd_assets.lib.inference.builds import read_json
from modelcd_assets.lib.inference.runtime import OnnxModel
from modelcd_assets.lib.layout import CandidateFiles


def predict(model_path: Path, feeds: dict[str, np.ndarray], threads: int | None = None) -> np.ndarray:
    """Class ids predicted by an ONNX model."""
    out = OnnxModel(model_path, threads=threads).logits(feeds)
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{model_path} produced NaN or Inf logits; the model is numerically broken")
    return out.argmax(axis=1)


def label_ids(labels: list[str], names: list[str]) -> np.ndarray:
    """Map label names to the model's class ids; unknown labels are an error the user must fix."""
    index = {name: i for i, name in enumerate(names)}
    missing = sorted(set(labels) - set(index))
    if missing:
        raise ValueError(f"labels {missing} in the data are not in the model's id2label {names}")
    return np.array([index[x] for x in labels])


def load_evaluation(files: CandidateFiles) -> tuple[dict, dict[str, np.ndarray]]:
    """The evaluation report and correctness arrays of a candidate, for the gates."""
    with np.load(files.correctness) as z:
        arrays = {k: z[k] for k in z.files}
    return read_json(files.evaluation), arrays
