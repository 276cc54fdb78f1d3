"""The causal-LM measurements on hand-made logits: NLL, INT8-vs-FP32 fidelity, repetition."""

import numpy as np
import pytest

from modelcd_assets.lib.causal_lm.scoring import log_softmax, position_fidelity, repeated_ngram_share, token_nll


def test_token_nll_scores_each_reply_token_from_the_position_before_it():
    logits = np.zeros((4, 3))
    logits[1, 2] = np.log(3.0)  # position 1 predicts ids[2]: p(2) = 3/5
    logits[2, 0] = np.log(4.0)  # position 2 predicts ids[3]: p(0) = 4/6
    nll = token_nll(logits, [1, 1, 2, 0], reply_start=2)
    assert nll == pytest.approx([-np.log(3 / 5), -np.log(4 / 6)])


@pytest.mark.parametrize("start", [0, 4])
def test_a_reply_outside_the_sequence_is_refused(start):
    with pytest.raises(ValueError, match="reply must start"):
        token_nll(np.zeros((4, 3)), [1, 1, 2, 0], reply_start=start)


def test_identical_logits_agree_fully_and_a_changed_top1_is_counted():
    rng = np.random.default_rng(0)
    fp32 = [rng.normal(size=(50, 20)), rng.normal(size=(30, 20))]
    targets = [rng.integers(0, 20, 50), rng.integers(0, 20, 30)]
    same = position_fidelity(fp32, fp32, targets)
    assert (same.top1_agreement, same.top1_in_top5, same.positions) == (1.0, 1.0, 80)
    assert same.mean_kl == pytest.approx(0.0, abs=1e-12) and same.perplexity_change == pytest.approx(0.0)
    flipped = [x.copy() for x in fp32]
    worst = flipped[0].argmin(axis=1)
    flipped[0][np.arange(50), worst] += 100.0  # INT8's top-1 is FP32's least likely token on 50 of 80 positions
    off = position_fidelity(flipped, fp32, targets)
    assert off.top1_agreement == pytest.approx(30 / 80) and off.top1_in_top5 == pytest.approx(30 / 80)
    assert off.mean_kl > 1.0


def test_kl_matches_its_definition():
    p, q = np.array([[0.0, 1.0, 2.0]]), np.array([[0.5, 0.5, 0.5]])
    lp, lq = log_softmax(p), log_softmax(q)
    expected = float(np.sum(np.exp(lp) * (lp - lq)))
    assert position_fidelity([q], [p], [np.array([2])]).mean_kl == pytest.approx(expected)


def test_mismatched_positions_are_refused():
    with pytest.raises(ValueError, match="same positions"):
        position_fidelity([np.zeros((3, 5))], [np.zeros((4, 5))], [np.zeros(4, int)])


def test_repeated_ngram_share():
    assert repeated_ngram_share([1, 2, 3, 4, 5]) == 0.0
    assert repeated_ngram_share([7] * 20) == pytest.approx(1 - 1 / 18)
    assert repeated_ngram_share([1, 2]) == 0.0
