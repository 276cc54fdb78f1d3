"""Evidently-backed drift numbers on the demo's own traffic samples."""

import numpy as np

from modelcd_assets.lib.demo.tickets import LABELS, generate
from modelcd_assets.lib.inference.tokens import encode
from modelcd_assets.lib.judging.drift import describe, input_drift, prediction_drift
from modelcd_assets.lib.judging.gates import judge_drift
from modelcd_assets.lib.judging.policy import DriftPolicy


def _frame(base, examples):
    texts = [e.text for e in examples]
    return describe(texts, encode(base, texts)["attention_mask"])


def test_current_traffic_does_not_drift_and_shifted_traffic_does(tiny_base):
    reference = _frame(tiny_base, generate(2400, 2))
    current = input_drift(reference, _frame(tiny_base, generate(1000, 4)))
    shifted = input_drift(reference, _frame(tiny_base, generate(1000, 5, shifted=True)))
    policy = DriftPolicy()
    assert judge_drift(None, current, policy).passed, current
    assert not judge_drift(None, shifted, policy).passed, shifted


def test_prediction_drift_is_zero_for_identical_and_large_for_skewed():
    rng = np.random.default_rng(0)
    prod = list(rng.choice(LABELS, 1000))
    assert prediction_drift(prod, prod) == 0.0
    skewed = ["technical"] * 700 + prod[:300]
    assert prediction_drift(prod, skewed) > 0.1
