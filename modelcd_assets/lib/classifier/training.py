"""Fine-tuning sequence classifiers: LoRA adapters with peft, or every weight."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from modelcd_assets.lib.classifier.config import labels_of
from modelcd_assets.lib.classifier.model_io import copy_tokenizer, load_classifier, load_tokenizer
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.splits import Example


@dataclass(frozen=True)
class Training:
    steps: int = 200
    batch_size: int = 32
    learning_rate: float = 1e-3
    rank: int = 8
    alpha: int = 16
    max_length: int = 64
    seed: int = 0
    label_noise: float = 0.0  # extra labels flipped at training time, to make a deliberately worse model


def _fit(model, base_dir: Path, train: list[Example], cfg: Training, desc: str, after_step: Callable[[int], object] | None = None) -> None:
    """Train model in place for cfg.steps; after_step(k) is called after step k (1-based)."""
    rng = np.random.default_rng(cfg.seed)
    labels = labels_of(base_dir)
    label_id = {name: i for i, name in enumerate(labels)}
    y = np.array([label_id[ex.label] for ex in train])
    flip = rng.random(len(y)) < cfg.label_noise
    y[flip] = (y[flip] + rng.integers(1, len(labels), flip.sum())) % len(labels)
    tok = load_tokenizer(base_dir)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.learning_rate)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10) * max(0.05, 1 - s / max(1, cfg.steps)))
    texts = [ex.text for ex in train]
    order, pos = rng.permutation(len(texts)), 0
    bar = tqdm(range(cfg.steps), desc=desc, unit="step")
    for step in bar:
        if pos + cfg.batch_size > len(order):
            order, pos = rng.permutation(len(texts)), 0
        idx = order[pos : pos + cfg.batch_size]
        pos += cfg.batch_size
        enc = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=cfg.max_length, return_tensors="pt")
        out = model(**enc, labels=torch.from_numpy(y[idx]))
        out.loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
        bar.set_postfix(loss=f"{out.loss.item():.3f}")
        if after_step is not None:
            after_step(step + 1)
    model.eval()


def lora_model(model, config, start_from: Path | None = None):
    """A peft model over model: a new adapter of config (a peft LoraConfig), or the adapter in start_from to go on training,
    which is refused unless its rank, alpha and targets are config's, naming what differs."""
    from peft import PeftModel, get_peft_model

    if start_from is None:
        return get_peft_model(model, config)
    saved = json.loads((Path(start_from) / "adapter_config.json").read_text())
    have = {"rank": saved.get("r"), "alpha": saved.get("lora_alpha"), "targets": sorted(saved.get("target_modules") or [])}
    want = {"rank": config.r, "alpha": config.lora_alpha, "targets": sorted(config.target_modules)}
    if differ := [f"{k} {have[k]} (the recipe says {want[k]})" for k in want if have[k] != want[k]]:
        raise ModelcdError(f"{start_from} cannot be trained on with this recipe: its {', '.join(differ)}; train a new adapter instead")
    return PeftModel.from_pretrained(model, str(start_from), is_trainable=True)


def snapshot_saver(model, snapshots: Mapping[int, Path] | None, base_uri: str, steps: int) -> Callable[[int], object] | None:
    """What saves the adapter as it stands after step k into snapshots[k] while it trains on (a step outside 1..steps is
    refused, naming it); None without snapshots. Saving reads the weights and draws no random number: the finished adapter is
    the one a training without snapshots gives, byte for byte."""
    if not snapshots:
        return None
    if outside := sorted(k for k in snapshots if not 1 <= k <= steps):
        raise ModelcdError(f"snapshot steps {outside} are outside the training's 1..{steps} steps")
    return lambda k: save_lora(model, snapshots[k], base_uri) if k in snapshots else None


def save_lora(model, out_dir: Path, base_uri: str) -> Path:
    """A trained peft model's adapter saved in out_dir (safetensors), declaring base_uri as its base. peft writes the fields
    of adapter_config.json that it holds as sets (target_modules) in a set's order, which Python's string hashing changes
    from one process to the next: they are written sorted, so that one training gives one folder, byte for byte."""
    config = model.peft_config["default"]
    config.base_model_name_or_path = base_uri
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    sets = [key for key, value in config.to_dict().items() if isinstance(value, set)]
    if sets:
        path = out_dir / "adapter_config.json"
        saved = json.loads(path.read_text())
        saved.update({key: sorted(saved[key]) for key in sets})
        path.write_text(json.dumps(saved, indent=2, sort_keys=True))  # as peft writes it
    return out_dir


def train_adapter(
    base_dir: Path,
    train: list[Example],
    out_dir: Path,
    cfg: Training,
    base_uri: str,
    desc: str = "training adapter",
    start_from: Path | None = None,
    snapshots: Mapping[int, Path] | None = None,
) -> Path:
    """Train a LoRA adapter on train and save it (safetensors) declaring base_uri as its base. start_from: an adapter folder
    of the same base to go on training instead of a new adapter (lora_model). snapshots: {step: folder}, the adapter as it
    stood after that step saved there too (snapshot_saver)."""
    from peft import LoraConfig, TaskType

    torch.manual_seed(cfg.seed)
    model = lora_model(
        load_classifier(base_dir),
        LoraConfig(task_type=TaskType.SEQ_CLS, r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=0.05, target_modules=["query", "value"]),
        start_from,
    )
    _fit(model, base_dir, train, cfg, desc, snapshot_saver(model, snapshots, base_uri, cfg.steps))
    return save_lora(model, out_dir, base_uri)


def train_classifier(base_dir: Path, train: list[Example], out_dir: Path, cfg: Training, desc: str = "fine-tuning") -> Path:
    """Fine-tune every weight of base_dir and save a full model folder (safetensors plus tokenizer)."""
    torch.manual_seed(cfg.seed)
    model = load_classifier(base_dir)
    _fit(model, base_dir, train, cfg, desc)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    copy_tokenizer(base_dir, Path(out_dir))
    return Path(out_dir)
