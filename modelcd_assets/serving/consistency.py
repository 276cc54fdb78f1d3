"""The A/B check on every swap: the served model's logits on the probe texts against the gated INT8 logits recorded at gating."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from modelcd_assets.lib.errors import ModelcdError


class SwapRefused(ModelcdError):
    """A version could not be loaded, or failed its probe; the server keeps serving what it served."""


@dataclass(frozen=True)
class Consistency:
    examples: int
    max_abs_logit_diff: float
    top1_agreement: float

    def as_dict(self) -> dict:
        return {"examples": self.examples, "max_abs_logit_diff": self.max_abs_logit_diff, "top1_agreement": self.top1_agreement}


def compare(served: np.ndarray, recorded: np.ndarray, max_abs_diff: float, min_top1: float, what: str) -> Consistency:
    """Served vs recorded logits on the probe set; raises SwapRefused when they disagree beyond the policy."""
    if not np.all(np.isfinite(served)):
        raise SwapRefused(f"{what}: the probe produced non-finite logits; the version was not switched in")
    if served.shape != recorded.shape:
        raise SwapRefused(
            f"{what}: the probe gave logits of shape {served.shape}, the gated model recorded {recorded.shape}; the version was not"
            " switched in"
        )
    diff = float(np.max(np.abs(served - recorded)))
    agree = float(np.mean(served.argmax(1) == recorded.argmax(1)))
    result = Consistency(len(served), diff, agree)
    if diff > max_abs_diff or agree < min_top1:
        raise SwapRefused(
            f"{what}: the served model and the gated INT8 outputs recorded at gating disagree on {len(served)} probe texts (max |Δlogit|"
            f" {diff:.2e}, limit {max_abs_diff:.0e}; top-1 agreement {agree:.2%}, minimum {min_top1:.2%}); the version was not switched in"
        )
    return result
