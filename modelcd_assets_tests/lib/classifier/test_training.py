"""The classifier's adapter training: an adapter trained on from another starts from its weights (the demo's worse adapter
goes on from production's), and one of another shape is refused by name."""

import dataclasses

import numpy as np
import pytest
from safetensors.numpy import load_file

from modelcd_assets.lib.classifier.training import Training, train_adapter
from modelcd_assets.lib.demo.tickets import generate
from modelcd_assets.lib.errors import ModelcdError


def test_an_adapter_trained_on_from_another_starts_from_its_weights(tiny_base, tmp_path):
    train = generate(64, 2)
    recipe = Training(steps=2, batch_size=8, rank=4, alpha=8, max_length=16)
    first = train_adapter(tiny_base, train, tmp_path / "first", recipe, "models:/b/1")
    same = train_adapter(tiny_base, train, tmp_path / "same", dataclasses.replace(recipe, steps=0), "models:/b/1", start_from=first)
    on = train_adapter(tiny_base, train, tmp_path / "on", recipe, "models:/b/1", start_from=first)
    fresh = train_adapter(tiny_base, train, tmp_path / "fresh", dataclasses.replace(recipe, steps=0), "models:/b/1")
    a, b, c, d = (load_file(str(f / "adapter_model.safetensors")) for f in (first, same, on, fresh))
    assert a.keys() == b.keys() == c.keys() == d.keys()
    assert all(np.array_equal(a[k], b[k]) for k in a), "no step: the start adapter's weights (the classifier head included)"
    assert any(not np.array_equal(a[k], c[k]) for k in a), "two more steps move them"
    assert any(not np.array_equal(a[k], d[k]) for k in a), "a new adapter does not start from it"
    with pytest.raises(ModelcdError, match=r"first cannot be trained on with this recipe: its alpha 8 \(the recipe says 16\)"):
        train_adapter(tiny_base, train, tmp_path / "x", dataclasses.replace(recipe, alpha=16), "models:/b/1", start_from=first)
