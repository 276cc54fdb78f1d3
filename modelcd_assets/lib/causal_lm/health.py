"""Numerical and structural health of a causal-LM adapter on its base build, in the report layout the health gates read
(lib/judging/gates.py: weights_finite, weight_scale, loads_cleanly, adapter_fits_base, adapter_changes_outputs,
tokenizer, probe, gradients), so one set of gates judges both tasks."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from modelcd_assets.lib.causal_lm.adapter_file import ADAPTER_WEIGHTS, AdapterFit
from modelcd_assets.lib.causal_lm.chats import Chat, chat_ids
from modelcd_assets.lib.causal_lm.decoder import Decoder


def weight_scale(candidate: dict[str, np.ndarray], production: dict[str, np.ndarray]) -> dict[str, float]:
    """Each slot's norm (alpha/rank folded in) over production's, for the slots both fill."""
    return {k: float(np.linalg.norm(v) / (np.linalg.norm(production[k]) + 1e-12)) for k, v in sorted(candidate.items()) if k in production}


def _gradients(base_dir: Path, adapter_dir: Path, chats: list[Chat]) -> dict:
    """One backward pass of the adapter unmerged in torch + peft on evaluation chats: the loss and LoRA gradients finite."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from modelcd_assets.lib.causal_lm.training import _batch, hf_encoder

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
        model = PeftModel.from_pretrained(
            AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32), str(adapter_dir), is_trainable=True
        )
        rows = [chat_ids(hf_encoder(tokenizer), c, [tokenizer.eos_token_id]) for c in chats]
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        loss = model(**_batch(rows, pad)).loss
        loss.backward()
    except Exception as e:  # an adapter torch cannot even run is reported, and judged, as such
        return {"loss_finite": False, "nonfinite": [], "error": f"{type(e).__name__}: {e}"}
    bad = sorted(n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all())
    return {"loss_finite": bool(torch.isfinite(loss)), "nonfinite": bad}


def measure(
    adapter_dir: Path,
    base_dir: Path,
    build_dir: Path,
    fp32_dir: Path,
    adapter_file: Path | None,
    fit: AdapterFit,
    registered_base: str | None,
    params: dict[str, np.ndarray],
    production_params: dict[str, np.ndarray] | None,
    probe_chats: list[Chat],
) -> dict:
    """The health report of one adapter. adapter_file is None when the adapter does not fit the slots: the probes are
    then not run, and say so."""
    from modelcd_assets.lib.weights import nonfinite_tensors

    report: dict = {"nonfinite_tensors": {f"artifact/{ADAPTER_WEIGHTS}": nonfinite_tensors(Path(adapter_dir) / ADAPTER_WEIGHTS)}}
    if production_params is not None:
        report["weight_scale_vs_production"] = weight_scale(params, production_params)
    # Files the adapter ships besides its weights are judged by artifact_is_safe (lib/tasks/adapter_files.py), before this.
    report["merged_loading"] = {"missing_keys": fit.missing, "unexpected_keys": fit.extra, "mismatched_keys": fit.mismatched}
    report["adapter"] = {
        "shape_problems": fit.problems,
        "declared_base": fit.declared_base,
        "registered_base": registered_base,
        "modules_matched": fit.slots_filled // 2 if not fit.problems else 0,
        "rank": fit.rank,
        "head_not_provided": [],
        "max_output_change": 0.0,
    }
    int8 = Decoder(build_dir)
    from tokenizers import Tokenizer

    own = Path(adapter_dir) / "tokenizer.json"
    vocab = Tokenizer.from_file(str(own if own.is_file() else Path(build_dir) / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
    report["tokenizer"] = {"vocab_size": vocab, "embedding_rows": int(int8.vocab_size), "change_declared": False}
    if own.is_file():
        base_tok, adapter_tok = Tokenizer.from_file(str(Path(build_dir) / "tokenizer.json")), Tokenizer.from_file(str(own))
        report["tokenizer"]["probe_id_mismatches"] = [
            c.user for c in probe_chats if base_tok.encode(c.user).ids != adapter_tok.encode(c.user).ids
        ]
    if adapter_file is None:
        report["forward_error"] = "the adapter does not fill the base's slots, so it cannot run on the base build: " + "; ".join(
            fit.problems[:2]
        )
        report.update(
            probe_finite=False,
            probe_deterministic=False,
            gradients={"loss_finite": False, "nonfinite": [], "error": report["forward_error"]},
        )
        return report
    int8.load_adapter(adapter_file, "candidate")
    ids = [chat_ids(int8.encode_chat, c, int8.eos_ids)[0] for c in probe_chats]
    first = [int8.logits(i, "candidate") for i in ids]
    second = [int8.logits(i, "candidate") for i in ids]
    report["probe_finite"] = bool(all(np.isfinite(x).all() for x in first))
    report["probe_deterministic"] = bool(all(np.array_equal(a, b) for a, b in zip(first, second)))
    fp32 = Decoder(fp32_dir)
    fp32.load_adapter(adapter_file, "candidate")
    report["adapter"]["max_output_change"] = float(max(np.abs(fp32.logits(i, "candidate") - fp32.logits(i)).max() for i in ids))
    report["gradients"] = _gradients(base_dir, adapter_dir, probe_chats)
    return report
