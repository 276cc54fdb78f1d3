"""Fault builders for causal-LM adapters: each takes production's adapter (and its base's files) and writes one faulty
adapter of the same base. Plain Python on folders, like faults/builders.py; nothing here registers or gates."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

from modelcd_assets.faults.builders import (
    Candidate,
    Production,
    _copy,
    _require_adapter,
    base_json,
    edit_json,
    edit_tensors,
    new_tokens,
    shipped_beside,
    widen_lora,
)
from modelcd_assets.lib.causal_lm.contract import GENERATION_FILE, chat_template
from modelcd_assets.lib.release.registry import BUMP_DECLARED

B_OVERDRIVE = 50.0  # LoRA B times this: the update fifty times as strong
B_NOISE = 1.001  # LoRA B times this: a clean control, a change below any gate's resolution
SUBNORMAL, SUBNORMAL_SHARE = 1e-39, 0.25  # a float32 subnormal (below 1.18e-38), and the share of each LoRA A set to it
SAME_REPLY = "thank you for contacting us."  # what the same-text adapter answers to everything
# A golden prompt no small model's context holds: each word is at least one token, and SmolLM2's context is 8,192 (6,000
# words fit it: the sandbox measured them answered, not refused).
LONG_PROMPT_WORDS = 40_000


def scaled_lora_b(adapter: Path, out: Path, factor: float) -> Path:
    """A copy of the adapter folder with every LoRA B times factor: the same modules and slots, another update."""

    def scale(w):
        for k, v in w.items():
            if ".lora_B." in k:
                w[k] = v * factor

    return edit_tensors(_copy(adapter, out), scale)


def _lora_b(prod: Production, out: Path, factor: float) -> Candidate:
    _require_adapter(prod, "a LoRA B fault")
    return Candidate(scaled_lora_b(prod.artifact, out, factor))


def lora_b_overdriven(prod: Production, out: Path) -> Candidate:
    """Every LoRA B times 50: the same modules, an update fifty times too strong (perplexity blows up)."""
    return _lora_b(prod, out, B_OVERDRIVE)


def lora_b_noise(prod: Production, out: Path) -> Candidate:
    """Every LoRA B times 1.001: a clean control."""
    return _lora_b(prod, out, B_NOISE)


def nan_in_lora_b(prod: Production, out: Path) -> Candidate:
    """One NaN in one LoRA B."""
    _require_adapter(prod, "nan_in_lora_b")

    def poison(w):
        key = sorted(k for k in w if ".lora_B." in k)[0]
        w[key].view(-1)[0] = float("nan")

    return Candidate(edit_tensors(_copy(prod.artifact, out), poison))


def added_special_token(prod: Production, out: Path) -> Candidate:
    """The base's tokenizer with one more special token, shipped with the adapter: a vocabulary larger than the embedding table."""
    _require_adapter(prod, "added_special_token")
    folder = _copy(prod.artifact, out)
    tokenizer = json.loads((prod.base / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    new_id = 1 + max([*vocab.values(), *(t["id"] for t in tokenizer.get("added_tokens", []))])
    tokenizer.setdefault("added_tokens", []).append(
        {"id": new_id, "content": "<|tool|>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
    )
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    return Candidate(folder)


def chat_template_as_patch(prod: Production, out: Path) -> Candidate:
    """The base's chat template with its role headers changed, shipped with the adapter and declared a PATCH."""
    _require_adapter(prod, "chat_template_as_patch")
    folder = _copy(prod.artifact, out)
    template = chat_template(prod.base)
    (folder / "chat_template.jinja").write_text(
        template.replace("<|im_start|>", "<|im_start|>### ") if "<|im_start|>" in template else "### " + template
    )
    return Candidate(folder, tags={BUMP_DECLARED: "patch"})


def eos_changed(prod: Production, out: Path) -> Candidate:
    """A generation config whose EOS is another token than the base's, shipped with the adapter: it would never stop where the base does."""
    _require_adapter(prod, "eos_changed")
    folder = _copy(prod.artifact, out)
    config = json.loads((prod.base / GENERATION_FILE).read_text()) if (prod.base / GENERATION_FILE).is_file() else {}
    eos = config.get("eos_token_id", 2)
    config["eos_token_id"] = (eos[0] if isinstance(eos, list) else int(eos)) + 7
    (folder / GENERATION_FILE).write_text(json.dumps(config))
    return Candidate(folder)


def adapter_of_another_base(prod: Production, out: Path) -> Candidate:
    """An adapter trained for a base twice as wide (LoRA A and B on another hidden size), registered against production's base."""
    _require_adapter(prod, "adapter_of_another_base")
    return Candidate(edit_tensors(_copy(prod.artifact, out), widen_lora), base=prod.base_uri)


def other_rank(prod: Production, out: Path) -> Candidate:
    """The adapter cut to half its rank: it no longer fills the base's fixed-rank slots."""
    _require_adapter(prod, "other_rank")
    folder = _copy(prod.artifact, out)
    rank = json.loads((folder / "adapter_config.json").read_text())["r"]

    def halve(w):
        for k, v in w.items():
            if ".lora_A." in k:
                w[k] = v[: rank // 2].contiguous()
            elif ".lora_B." in k:
                w[k] = v[:, : rank // 2].contiguous()

    edit_tensors(folder, halve)
    edit_json(folder / "adapter_config.json", lambda cfg: cfg.update(r=rank // 2, lora_alpha=cfg["lora_alpha"] / 2))
    return Candidate(folder)


def other_targets(prod: Production, out: Path) -> Candidate:
    """The adapter's q_proj weights moved to k_proj: another set of target modules than the base's slots."""
    _require_adapter(prod, "other_targets")
    folder = _copy(prod.artifact, out)
    edit_tensors(folder, lambda w: {k.replace(".q_proj.", ".k_proj."): v for k, v in w.items()})
    edit_json(
        folder / "adapter_config.json",
        lambda cfg: cfg.__setitem__(
            "target_modules",
            sorted(
                {
                    "k_proj" if t == "q_proj" else t
                    for t in (cfg["target_modules"] if isinstance(cfg["target_modules"], list) else [cfg["target_modules"]])
                }
            ),
        ),
    )
    return Candidate(folder)


def same_reply(prod: Production, out: Path) -> Candidate:
    """An adapter trained to answer every ticket with the same sentence."""
    from modelcd_assets.lib.causal_lm.chats import Chat
    from modelcd_assets.lib.causal_lm.training import LmTraining, train_lm_adapter
    from modelcd_assets.lib.demo.replies import chats as demo_chats

    _require_adapter(prod, "same_reply")
    config = json.loads((prod.artifact / "adapter_config.json").read_text())
    chats = [Chat(c.system, c.user, SAME_REPLY) for c in demo_chats(200, 11)]
    train = LmTraining(
        steps=30,
        batch_size=8,
        learning_rate=5e-3,
        rank=int(config["r"]),
        alpha=int(config["lora_alpha"]),
        targets=tuple(sorted(config["target_modules"])),
        seed=7,
    )
    if out.exists():
        shutil.rmtree(out)
    return Candidate(train_lm_adapter(prod.base, chats, out, train, prod.base_uri, desc="training the same-reply adapter"))


def golden_prompt_beyond_context(sb, ref) -> contextlib.AbstractContextManager[None]:
    """A golden prompt longer than the model's context in the policy while the candidate is gated: refused by the one length rule."""

    def add(policy: dict) -> None:
        policy["golden_prompts"] = [
            *(policy.get("golden_prompts") or []),
            {"prompt": " ".join(["refund"] * LONG_PROMPT_WORDS), "expect": "billing"},
        ]

    return sb.policy_edited(add)


def subnormal_lora(prod: Production, out: Path) -> Candidate:
    """The smallest quarter of every LoRA A's values replaced by subnormal floats (+-1e-39): the same function to within
    those values, on a slow path of CPU floating point. The only way an adapter can change the speed of its base's graph."""
    import torch

    _require_adapter(prod, "subnormal_lora")

    def denormalize(w):
        for k, v in w.items():
            if ".lora_A." in k:
                small = v.abs() <= v.abs().float().quantile(SUBNORMAL_SHARE).to(v.dtype)
                w[k] = torch.where(small, torch.where(v < 0, -SUBNORMAL, SUBNORMAL).to(v.dtype), v)

    return Candidate(edit_tensors(_copy(prod.artifact, out), denormalize))


def saved_as(dtype_name: str):
    """A builder of production's adapter with its weights saved in another float type: a clean control (peft users ship bf16 and fp16)."""

    def build(prod: Production, out: Path) -> Candidate:
        import torch

        _require_adapter(prod, f"saved_as({dtype_name})")
        dtype = getattr(torch, dtype_name)
        return Candidate(edit_tensors(_copy(prod.artifact, out), lambda w: {k: v.to(dtype) for k, v in w.items()}))

    build.__doc__ = f"Production's adapter saved as {dtype_name}: a clean control."
    return build


# Tokenizer and config files an adapter ships beside its weights, each the base's copy with one change (or, where the base
# has no such file, one made from its tokenizer.json): every adapter of a base is served with the base build's own.


def _other_special_token(prod: Production, current: str) -> str:
    """A special token of the base's tokenizer other than current."""
    added = base_json(prod, "tokenizer.json", "another EOS")["added_tokens"]
    return next(t["content"] for t in added if t.get("special") and t["content"] != current)


def _eos(prod: Production) -> str:
    eos = base_json(prod, "tokenizer_config.json", "another EOS")["eos_token"]
    return eos["content"] if isinstance(eos, dict) else eos


def added_tokens_file(prod: Production, out: Path) -> Candidate:
    """added_tokens.json beside the adapter: three tokens with ids past the base's embedding table (49152-49154 on SmolLM2)."""
    return shipped_beside(prod, out, "added_tokens.json", new_tokens(prod, ["<|tool|>", "<|call|>", "<|result|>"]), "lm_added_tokens_file")


def special_tokens_map_eos(prod: Production, out: Path) -> Candidate:
    """special_tokens_map.json beside the adapter with another EOS: the base's copy, or the special tokens its tokenizer_config.json
    names."""
    if (prod.base / "special_tokens_map.json").is_file():
        tokens = base_json(prod, "special_tokens_map.json", "lm_special_tokens_map_eos")
    else:
        tokens = {k: v for k, v in base_json(prod, "tokenizer_config.json", "lm_special_tokens_map_eos").items() if k.endswith("_token")}
    tokens["eos_token"] = _other_special_token(prod, _eos(prod))
    return shipped_beside(prod, out, "special_tokens_map.json", tokens, "lm_special_tokens_map_eos")


def tokenizer_config_eos(prod: Production, out: Path) -> Candidate:
    """The base's tokenizer_config.json with another eos_token, beside the adapter."""
    cfg = base_json(prod, "tokenizer_config.json", "lm_tokenizer_config_eos")
    cfg["eos_token"] = _other_special_token(prod, _eos(prod))
    return shipped_beside(prod, out, "tokenizer_config.json", cfg, "lm_tokenizer_config_eos")


def tokenizer_config_chat_template(prod: Production, out: Path) -> Candidate:
    """The base's tokenizer_config.json with another chat_template (role headers changed), beside the adapter."""
    cfg = base_json(prod, "tokenizer_config.json", "lm_tokenizer_config_chat_template")
    cfg["chat_template"] = "### " + chat_template(prod.base)
    return shipped_beside(prod, out, "tokenizer_config.json", cfg, "lm_tokenizer_config_chat_template")


def vocab_json_edited(prod: Production, out: Path) -> Candidate:
    """vocab.json beside the adapter with two tokens' ids swapped: the base's copy, or the vocabulary of its tokenizer.json."""
    if (prod.base / "vocab.json").is_file():
        vocab = base_json(prod, "vocab.json", "lm_vocab_json_edited")
    else:
        vocab = base_json(prod, "tokenizer.json", "lm_vocab_json_edited")["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[-2:]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    return shipped_beside(prod, out, "vocab.json", vocab, "lm_vocab_json_edited")


def merges_txt_edited(prod: Production, out: Path) -> Candidate:
    """merges.txt beside the adapter with its first two merges swapped: the base's copy, or the merges of its tokenizer.json."""
    if (prod.base / "merges.txt").is_file():
        lines = (prod.base / "merges.txt").read_text().splitlines()
    else:
        merges = base_json(prod, "tokenizer.json", "lm_merges_txt_edited")["model"]["merges"]
        lines = ["#version: 0.2", *(m if isinstance(m, str) else " ".join(m) for m in merges)]
    first = 1 if lines[0].startswith("#version") else 0
    lines[first], lines[first + 1] = lines[first + 1], lines[first]
    return shipped_beside(prod, out, "merges.txt", "\n".join(lines) + "\n", "lm_merges_txt_edited")


def config_json_changed(prod: Production, out: Path) -> Candidate:
    """The base's config.json with twice its context (max_position_embeddings), beside the adapter: the base build serves its own."""
    cfg = base_json(prod, "config.json", "lm_config_json_changed")
    cfg["max_position_embeddings"] = 2 * int(cfg["max_position_embeddings"])
    return shipped_beside(prod, out, "config.json", cfg, "lm_config_json_changed")
