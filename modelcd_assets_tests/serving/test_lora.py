"""Per-request unmerged LoRA: the same numbers as peft's merge, no cross-talk between threads, refusals."""

from __future__ import annotations

import json
import shutil
import threading

import numpy as np
import pytest

from modelcd_assets.lib.errors import BadCandidate
from modelcd_assets.lib.model_io import merge_adapter
from modelcd_assets.serving.engine import Engine
from modelcd_assets.serving.lora import read_adapter

TEXTS = ["I was charged twice", "the app crashes on login", "parcel never arrived", "change my email address"]


@pytest.fixture(scope="module")
def engines(tiny_trained, tiny_adapters, tmp_path_factory):
    root = tmp_path_factory.mktemp("lora")
    engine = Engine(tiny_trained, "base")
    adapters, merged = {}, {}
    for name in ("good", "good2"):
        adapters[name] = read_adapter(tiny_adapters[name], name, name)
        engine.install(adapters[name])
        merge_adapter(tiny_trained, tiny_adapters[name], root / name)
        merged[name] = Engine(root / name, name).logits(TEXTS, None)
    return engine, adapters, merged


def test_unmerged_lora_matches_the_merged_model(engines, tiny_trained):
    engine, adapters, merged = engines
    for name, adapter in adapters.items():
        assert np.max(np.abs(engine.logits(TEXTS, adapter) - merged[name])) < 1e-5
    # Unbound requests get the bare base model, untouched by installed adapters.
    assert np.max(np.abs(engine.logits(TEXTS, None) - Engine(tiny_trained, "fresh").logits(TEXTS, None))) == 0


def test_two_threads_with_two_adapters_never_see_each_other(engines):
    engine, adapters, merged = engines
    assert np.max(np.abs(merged["good"] - merged["good2"])) > 1e-3
    wrong: list[float] = []

    def hammer(name: str) -> None:
        for _ in range(150):
            diff = float(np.max(np.abs(engine.logits(TEXTS, adapters[name]) - merged[name])))
            if diff > 1e-5:
                wrong.append(diff)

    threads = [threading.Thread(target=hammer, args=(n,)) for n in ("good", "good2", "good", "good2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


@pytest.mark.parametrize("change, message", [
    ({"use_dora": True}, "use_dora"),
    ({"bias": "all"}, "bias"),
    ({"peft_type": "IA3"}, "LoRA adapters only"),
    ({"r": 8}, "rank 4, config says r=8"),
])
def test_adapters_the_server_cannot_serve_exactly_are_refused(tiny_adapters, tmp_path, change, message):
    folder = shutil.copytree(tiny_adapters["good"], tmp_path / "adapter")
    cfg = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**cfg, **change}))
    with pytest.raises(BadCandidate, match=message):
        read_adapter(folder, "x", "x")


def test_an_adapter_for_another_base_is_refused_before_it_serves(engines, tiny_adapters, tmp_path):
    from safetensors.torch import load_file, save_file

    engine, _, _ = engines
    folder = shutil.copytree(tiny_adapters["good"], tmp_path / "adapter")
    weights = load_file(str(folder / "adapter_model.safetensors"))
    weights = {k.replace("layer.1.", "layer.7."): v for k, v in weights.items()}
    save_file(weights, str(folder / "adapter_model.safetensors"))
    with pytest.raises(BadCandidate, match="does not have"):
        engine.install(read_adapter(folder, "x", "x"))
