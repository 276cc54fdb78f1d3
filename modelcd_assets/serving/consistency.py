"""The A/B check on every swap: the served model against the merged ONNX model its gates judged."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.export import INPUT_NAMES
from modelcd_assets.lib.runtime import logits, session
from modelcd_assets.lib.tokens import tokenize


class SwapRefused(ModelcdError):
    """A version could not be loaded, or failed its probe; the server keeps serving what it served."""


@dataclass(frozen=True)
class Consistency:
    examples: int
    max_abs_logit_diff: float
    top1_agreement: float

    def as_dict(self) -> dict:
        return {"examples": self.examples, "max_abs_logit_diff": self.max_abs_logit_diff, "top1_agreement": self.top1_agreement}


def onnx_logits(onnx_path: Path, tokenizer, texts: list[str], max_length: int) -> np.ndarray:
    """Logits of the gated ONNX model on texts, tokenized as the server tokenizes them."""
    enc = tokenize(tokenizer, texts, max_length, "np")
    feeds = {k: np.asarray(enc[k], dtype=np.int64) for k in INPUT_NAMES if k in enc}
    return logits(session(onnx_path, threads=1), feeds)


def compare(served: np.ndarray, reference: np.ndarray, max_abs_diff: float, min_top1: float, what: str) -> Consistency:
    """Served vs reference logits on the probe set; raises SwapRefused when they disagree beyond the policy."""
    if not np.all(np.isfinite(served)):
        raise SwapRefused(f"{what}: the probe produced non-finite logits; the version was not switched in")
    diff = float(np.max(np.abs(served - reference)))
    agree = float(np.mean(served.argmax(1) == reference.argmax(1)))
    result = Consistency(len(served), diff, agree)
    if diff > max_abs_diff or agree < min_top1:
        raise SwapRefused(
            f"{what}: served model and the gated ONNX disagree on {len(served)} probe texts (max |Δlogit| {diff:.2e}, limit {max_abs_diff:.0e}; "
            f"top-1 agreement {agree:.2%}, minimum {min_top1:.2%}); the version was not switched in"
        )
    return result
