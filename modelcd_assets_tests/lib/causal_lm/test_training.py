"""The adapter training's loss: the reply tokens' mean cross-entropy, with the head applied only where a reply token is
predicted, equals the loss transformers computes from labels over every position, and so do its gradients."""

import numpy as np
import pytest
import torch

from modelcd_assets.lib.causal_lm.base import build_tiny_causal_lm
from modelcd_assets.lib.causal_lm.chats import chat_ids
from modelcd_assets.lib.causal_lm.training import _batch, _reply_loss, hf_encoder
from modelcd_assets.lib.demo.replies import chats, corpus


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    train = chats(40, 3)
    base = build_tiny_causal_lm(tmp_path_factory.mktemp("tiny") / "base", corpus(train))
    tok = AutoTokenizer.from_pretrained(str(base))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    rows = [chat_ids(hf_encoder(tok), c, [tok.eos_token_id]) for c in train[:6]]
    assert len({len(ids) for ids, _ in rows}) > 1, "rows of one length would not exercise the padding"
    return model, rows, tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id


def _grads(model, loss):
    model.zero_grad()
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


def test_the_reply_loss_is_the_loss_from_labels_with_the_same_gradients(tiny):
    model, rows, pad = tiny
    full = model(**_batch(rows, pad)).loss
    ours = _reply_loss(model, _batch(rows, pad))
    assert ours.item() == pytest.approx(full.item(), rel=1e-5)
    for a, b in zip(_grads(model, model(**_batch(rows, pad)).loss), _grads(model, _reply_loss(model, _batch(rows, pad)))):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-6)


def test_a_reply_start_one_token_off_changes_the_loss(tiny):
    """The positions kept are the ones that predict the labelled tokens: a shift by one is seen."""
    model, rows, pad = tiny
    right = _reply_loss(model, _batch(rows, pad)).item()
    shifted = _reply_loss(model, _batch([(ids, start + 1) for ids, start in rows], pad)).item()
    assert shifted != pytest.approx(right, rel=1e-4)
    assert _reply_loss(model, _batch([(ids, start + 1) for ids, start in rows], pad)).item() == pytest.approx(
        model(**_batch([(ids, start + 1) for ids, start in rows], pad)).loss.item(), rel=1e-5
    )
