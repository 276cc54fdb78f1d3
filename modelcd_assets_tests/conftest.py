"""Tiny models built from configs, a throwaway state folder per test module, and crafted candidates."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from modelcd_assets.lib.base_model import build_tiny_base  # noqa: E402
from modelcd_assets.lib.data import LABELS, generate, write_splits  # noqa: E402
from modelcd_assets.lib.registry import Registry  # noqa: E402
from modelcd_assets.lib.settings import local_defaults  # noqa: E402
from modelcd_assets.lib.training import Training, train_adapter, train_classifier  # noqa: E402


@dataclass(frozen=True)
class Env:
    home: Path
    env: dict[str, str]

    @property
    def registry(self) -> Registry:
        return Registry(self.env["MLFLOW_TRACKING_URI"], self.env["MODELCD_MLFLOW_ARTIFACTS"])

    @property
    def data(self) -> Path:
        return Path(self.env["MODELCD_DATA"])

    def policy(self, model_name: str, text: str) -> Path:
        path = Path(self.env["MODELCD_POLICY_DIR"]) / f"{model_name}.yaml"
        path.write_text(text)
        return path


def make_env(home: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    """Embedded defaults under home, exported for Dagster's EnvVar resources."""
    env = local_defaults(home)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("MODELCD_DATA", "MODELCD_POLICY_DIR", "MODELCD_MLFLOW_ARTIFACTS", "DAGSTER_HOME"):
        Path(env[key]).mkdir(parents=True, exist_ok=True)
    write_splits(Path(env["MODELCD_DATA"]))
    return Env(home, env)


@pytest.fixture
def modelcd_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    return make_env(tmp_path / "home", monkeypatch)


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer BERT classifier (hidden 32) with MiniLM's tokenizer."""
    return build_tiny_base(tmp_path_factory.mktemp("tiny") / "random", list(LABELS))


@pytest.fixture(scope="session")
def tiny_trained(tiny_base: Path, tmp_path_factory) -> Path:
    """The tiny classifier fine-tuned on the synthetic tickets: about 89% accurate."""
    return train_classifier(tiny_base, generate(3000, 1), tmp_path_factory.mktemp("tiny") / "trained", Training(steps=150, learning_rate=3e-3), desc="tiny")


@pytest.fixture(scope="session")
def tiny_adapters(tiny_trained: Path, tmp_path_factory) -> dict[str, Path]:
    """LoRA adapters on the trained tiny classifier; they declare the base as models:/tiny-base/1."""
    root = tmp_path_factory.mktemp("adapters")
    train = generate(3000, 1)
    return {
        "good": train_adapter(tiny_trained, train, root / "good", Training(steps=10, learning_rate=1e-4, rank=4, alpha=8, seed=3), "models:/tiny-base/1"),
        "worse": train_adapter(tiny_trained, train, root / "worse", Training(steps=60, learning_rate=3e-3, rank=4, alpha=8, seed=4, label_noise=0.5), "models:/tiny-base/1"),
    }


def _copy_model(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.fixture(scope="session")
def crafted(tiny_trained: Path, tmp_path_factory) -> dict[str, Path]:
    """Full-model candidates, each built to break one gate and nothing before it."""
    import torch
    from safetensors.torch import load_file, save_file

    root = tmp_path_factory.mktemp("crafted")
    out = {}
    # INT8-unfaithful: logits shrunk 1e4-fold. FP32 argmax is unchanged; INT8 rounding noise flips it.
    d = _copy_model(tiny_trained, root / "unfaithful")
    w = load_file(str(d / "model.safetensors"))
    w["classifier.weight"] = w["classifier.weight"] * 1e-4
    w["classifier.bias"] = w["classifier.bias"] * 1e-4
    save_file(w, str(d / "model.safetensors"), metadata={"format": "pt"})
    out["unfaithful"] = d
    # Slow: every FFN widened 128-fold with zero weights. Outputs are identical, compute is not.
    d = _copy_model(tiny_trained, root / "slow")
    w = load_file(str(d / "model.safetensors"))
    cfg = json.loads((d / "config.json").read_text())
    wide = cfg["intermediate_size"] * 128
    for k in list(w):
        if k.endswith("intermediate.dense.weight"):
            w[k] = torch.cat([w[k], torch.zeros(wide - w[k].shape[0], w[k].shape[1])], 0)
        elif k.endswith("intermediate.dense.bias"):
            w[k] = torch.cat([w[k], torch.zeros(wide - w[k].shape[0])], 0)
        elif k.endswith("output.dense.weight") and "attention" not in k:
            w[k] = torch.cat([w[k], torch.zeros(w[k].shape[0], wide - w[k].shape[1])], 1)
    save_file({k: v.contiguous() for k, v in w.items()}, str(d / "model.safetensors"), metadata={"format": "pt"})
    cfg["intermediate_size"] = wide
    (d / "config.json").write_text(json.dumps(cfg))
    out["slow"] = d
    return out
