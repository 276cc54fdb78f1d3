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


def _set_order(seed: int) -> list[str]:
    import subprocess
    import sys

    code = "print(','.join(list({'query', 'value'})))"
    env = {"PYTHONHASHSEED": str(seed), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip().split(",")


def test_one_training_saves_one_adapter_config_byte_for_byte_in_every_process(tiny_base, tmp_path):
    """peft writes target_modules from a set, whose order Python's string hashing changes per process: the folder (and its
    registered content hash) would differ between two runs of one training. Reproduced by saving in two processes whose
    hash seeds order the set differently."""
    import subprocess
    import sys

    seeds = next((a, b) for a in range(20) for b in range(a + 1, 20) if _set_order(a) != _set_order(b))
    script = (
        "import sys; from pathlib import Path; from modelcd_assets.lib.classifier.training import Training, train_adapter; "
        "from modelcd_assets.lib.demo.tickets import generate; "
        f"train_adapter(Path({str(tiny_base)!r}), generate(16, 2), Path(sys.argv[1]), Training(steps=0, rank=4, alpha=8), 'models:/b/1')"
    )
    for seed in seeds:
        env = {**__import__("os").environ, "PYTHONHASHSEED": str(seed)}
        subprocess.run([sys.executable, "-c", script, str(tmp_path / str(seed))], env=env, check=True, capture_output=True)
    a, b = ((tmp_path / str(s) / "adapter_config.json").read_bytes() for s in seeds)
    assert a == b
    assert b'"query",\n    "value"' in a


def test_a_snapshot_is_the_adapter_as_it_stood_and_changes_nothing_after(tiny_base, tmp_path):
    """The demo's first production is its good adapter's snapshot halfway: saving it must leave the finished adapter as a
    training without snapshots leaves it, and hold what that many steps give."""
    train = generate(64, 2)
    recipe = Training(steps=4, batch_size=8, rank=4, alpha=8, max_length=16)
    plain = train_adapter(tiny_base, train, tmp_path / "plain", recipe, "models:/b/1")
    snapped = train_adapter(tiny_base, train, tmp_path / "snapped", recipe, "models:/b/1", snapshots={2: tmp_path / "at2"})
    assert (plain / "adapter_model.safetensors").read_bytes() == (snapped / "adapter_model.safetensors").read_bytes()
    at2 = load_file(str(tmp_path / "at2" / "adapter_model.safetensors"))
    end = load_file(str(plain / "adapter_model.safetensors"))
    assert any(not np.array_equal(at2[k], end[k]) for k in end)
    assert (tmp_path / "at2" / "adapter_config.json").read_bytes() == (plain / "adapter_config.json").read_bytes()
    with pytest.raises(ModelcdError, match=r"snapshot steps \[5\] are outside the training's 1..4 steps"):
        train_adapter(tiny_base, train, tmp_path / "x", recipe, "models:/b/1", snapshots={5: tmp_path / "at5"})
