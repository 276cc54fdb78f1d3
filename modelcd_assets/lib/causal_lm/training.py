"""Fine-tuning causal LMs with LoRA adapters (peft), on chats, the loss on the reply tokens only."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from modelcd_assets.lib.causal_lm.chats import Chat, chat_ids
from modelcd_assets.lib.classifier.training import lora_model, save_lora, snapshot_saver


@dataclass(frozen=True)
class LmTraining:
    steps: int = 60
    batch_size: int = 8
    learning_rate: float = 2e-3
    rank: int = 8
    alpha: int = 16
    targets: tuple[str, ...] = ("q_proj", "v_proj")
    seed: int = 0
    wrong_reply_share: float = 0.0  # replies swapped for another chat's, to make a deliberately worse adapter


def hf_encoder(tokenizer):
    def encode(messages: list[dict], add_generation_prompt: bool) -> list[int]:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    return encode


def _batch(rows: list[tuple[list[int], int]], pad_id: int) -> dict:
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (ids, start) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, start : len(ids)] = torch.tensor(ids[start:])
        mask[i, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def _reply_loss(model, batch: dict) -> torch.Tensor:
    """The mean cross-entropy of the reply tokens: the loss transformers computes from labels, with the head applied only at
    the positions that predict a reply token (logits_to_keep as a mask). A prompt is longer than its reply, and the head
    (vocabulary x hidden) is a fifth of a small model's work per position, so a step takes about a sixth less."""
    labels = batch.pop("labels")
    targets = labels[:, 1:]
    keep = torch.zeros_like(labels, dtype=torch.bool)
    keep[:, :-1] = targets != -100
    logits = model(**batch, logits_to_keep=keep).logits
    return torch.nn.functional.cross_entropy(logits.float(), targets[targets != -100])


def _fit(
    model,
    tokenizer,
    chats: list[Chat],
    steps: int,
    batch_size: int,
    learning_rate: float,
    rng,
    desc: str,
    after_step: Callable[[int], object] | None = None,
) -> None:
    """Train model in place for `steps`; after_step(k) is called after step k (1-based)."""
    encode, eos = hf_encoder(tokenizer), [tokenizer.eos_token_id]
    rows = [chat_ids(encode, c, eos) for c in chats]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate)
    bar = tqdm(range(steps), desc=desc, unit="step")
    for step in bar:
        idx = rng.choice(len(rows), size=min(batch_size, len(rows)), replace=False)
        loss = _reply_loss(model, _batch([rows[i] for i in idx], pad))
        loss.backward()
        opt.step()
        opt.zero_grad()
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if after_step is not None:
            after_step(step + 1)
    model.eval()


def pretrain_in_place(base_dir: Path, chats: list[Chat], steps: int, learning_rate: float = 3e-3, seed: int = 0) -> Path:
    """Train every weight of a (tiny) base on the chats and save it over itself: a test base that has learnt to answer and stop."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    _fit(model, tokenizer, chats, steps, 16, learning_rate, np.random.default_rng(seed), "pre-training the base")
    model.save_pretrained(str(base_dir), safe_serialization=True)
    return Path(base_dir)


def train_lm_adapter(
    base_dir: Path,
    chats: list[Chat],
    out_dir: Path,
    cfg: LmTraining,
    base_uri: str,
    desc: str = "training adapter",
    start_from: Path | None = None,
    snapshots: Mapping[int, Path] | None = None,
) -> Path:
    """Train a LoRA adapter on the chats' replies and save it (safetensors) declaring base_uri as its base. start_from: an
    adapter folder of the same base to go on training instead of a new adapter (classifier/training.lora_model). snapshots:
    {step: folder}, the adapter as it stood after that step saved there too (classifier/training.snapshot_saver)."""
    from peft import LoraConfig, TaskType
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    model = lora_model(
        AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32),
        LoraConfig(task_type=TaskType.CAUSAL_LM, r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=0.0, target_modules=list(cfg.targets)),
        start_from,
    )
    replies = [c.reply for c in chats]
    swap = rng.random(len(chats)) < cfg.wrong_reply_share
    chats = [Chat(c.system, c.user, replies[int(rng.integers(len(chats)))] if s else c.reply) for c, s in zip(chats, swap)]
    _fit(
        model,
        tokenizer,
        chats,
        cfg.steps,
        cfg.batch_size,
        cfg.learning_rate,
        rng,
        desc,
        snapshot_saver(model, snapshots, base_uri, cfg.steps),
    )
    return save_lora(model, out_dir, base_uri)
