"""The adapter training: its loss (the reply tokens' mean cross-entropy, with the head applied only where a reply token is
predicted) equals the loss transformers computes from labels over every position, and so do its gradients; an adapter
trained on from another starts from its weights."""

import dataclasses

import numpy as np
import pytest
import torch

from modelcd_assets.lib.causal_lm.base import build_tiny_causal_lm
from modelcd_assets.lib.causal_lm.chats import chat_ids
from modelcd_assets.lib.causal_lm.training import _batch, _reply_loss, hf_encoder
from modelcd_assets.lib.demo.replies import chats, corpus


@pytest.fixture(scope="module")
def tiny_base_dir(tmp_path_factory):
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny") / "base", corpus(chats(40, 3)))


@pytest.fixture(scope="module")
def tiny(tiny_base_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    train, base = chats(40, 3), tiny_base_dir
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


def _lora(folder):
    from safetensors.numpy import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def test_an_adapter_trained_on_from_another_starts_from_its_weights(tiny_base_dir, tmp_path):
    from modelcd_assets.lib.causal_lm.training import LmTraining, train_lm_adapter
    from modelcd_assets.lib.errors import ModelcdError

    train = chats(40, 3)
    recipe = LmTraining(steps=2, batch_size=4, rank=4, alpha=8, learning_rate=5e-3)
    first = train_lm_adapter(tiny_base_dir, train, tmp_path / "first", recipe, "models:/b/1")
    fresh = train_lm_adapter(tiny_base_dir, train, tmp_path / "fresh", dataclasses.replace(recipe, steps=0), "models:/b/1")
    same = train_lm_adapter(tiny_base_dir, train, tmp_path / "same", dataclasses.replace(recipe, steps=0), "models:/b/1", start_from=first)
    on = train_lm_adapter(tiny_base_dir, train, tmp_path / "on", recipe, "models:/b/1", start_from=first)
    a, b, c, d = _lora(first), _lora(same), _lora(on), _lora(fresh)
    assert a.keys() == b.keys() == c.keys() == d.keys()
    assert all(np.array_equal(a[k], b[k]) for k in a), "no step: the start adapter's weights, unchanged"
    assert any(not np.array_equal(a[k], c[k]) for k in a), "two more steps move them"
    assert any(not np.array_equal(a[k], d[k]) for k in a), "a new adapter does not start from it"
    with pytest.raises(ModelcdError, match=r"first cannot be trained on with this recipe: its rank 4 \(the recipe says 8\)"):
        train_lm_adapter(tiny_base_dir, train, tmp_path / "x", dataclasses.replace(recipe, rank=8), "models:/b/1", start_from=first)
