"""Numerical and structural health of a candidate, measured after the safety scan and before export."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from modelcd_assets.lib.classifier.model_io import load_tokenizer, quiet_transformers
from modelcd_assets.lib.inference.tokens import TextEncoder
from modelcd_assets.lib.release.artifact import ADAPTER
from modelcd_assets.lib.weights import nonfinite_tensors

PROBE_TEXTS = (
    "i was charged twice for my invoice.",
    "the app keeps crashing when i open the dashboard!",
    "where is my parcel? tracking number 12345",
    "Ünïcödé, emoji 🙂 and MIXED case text.",
)
# A weight whose change relative to the base exceeds this is reported (not judged) as an outlier.
NORM_OUTLIER_RATIO = 0.5


def _loading_info(model_dir: Path) -> tuple[torch.nn.Module, dict]:
    from transformers import AutoModelForSequenceClassification

    quiet_transformers()
    torch.manual_seed(0)
    model, info = AutoModelForSequenceClassification.from_pretrained(
        str(model_dir), local_files_only=True, trust_remote_code=False, output_loading_info=True
    )
    return model.eval(), {k: sorted(map(str, v)) for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys")}


def adapter_fit(adapter_dir: Path, base_model: torch.nn.Module, base_missing: list[str], registered_base: str | None) -> dict:
    """Declared base, LoRA shapes and rank against the base's modules, modules matched, head coverage."""
    from safetensors import safe_open

    cfg = json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
    rank = int(cfg.get("r", 0))
    shapes = {name: tuple(p.shape) for name, p in base_model.state_dict().items()}
    matched, problems, saved = set(), [], set()
    with safe_open(str(Path(adapter_dir) / "adapter_model.safetensors"), "np") as f:
        for key in f.keys():
            shape = tuple(f.get_slice(key).get_shape())
            name = key.removeprefix("base_model.model.")
            if ".lora_A." in name or ".lora_B." in name:
                module = name.split(".lora_")[0]
                target = shapes.get(f"{module}.weight")
                if target is None:
                    problems.append(f"{module}: no such module in the base")
                    continue
                out_dim, in_dim = target
                want = (rank, in_dim) if ".lora_A." in name else (out_dim, rank)
                if shape != want:
                    problems.append(f"{key}: shape {list(shape)}, expected {list(want)} for rank {rank}")
                matched.add(module)
            else:
                saved.add(name.replace(".modules_to_save.default", ""))
                if name in shapes and shapes[name] != shape:
                    problems.append(f"{key}: shape {list(shape)} does not fit the base's {list(shapes[name])}")
    return {
        "declared_base": cfg.get("base_model_name_or_path"),
        "registered_base": registered_base,
        "rank": rank,
        "modules_matched": len(matched),
        "shape_problems": problems,
        "head_not_provided": sorted(k for k in base_missing if k not in saved),
    }


def _probe_feeds(model_dir: Path) -> dict:
    return {k: torch.from_numpy(v) for k, v in TextEncoder(model_dir).encode(list(PROBE_TEXTS)).items()}


def weight_scale(candidate_merged: Path, production_merged: Path) -> dict[str, float]:
    """Frobenius norm of every weight matrix, candidate / production, for the matrices both models have."""
    from safetensors import safe_open

    ratios = {}
    with (
        safe_open(str(Path(candidate_merged) / "model.safetensors"), "pt") as cand,
        safe_open(str(Path(production_merged) / "model.safetensors"), "pt") as prod,
    ):
        for name in sorted(set(cand.keys()) & set(prod.keys())):
            c, p = cand.get_tensor(name), prod.get_tensor(name)
            if c.ndim < 2 or c.shape != p.shape or not c.dtype.is_floating_point:
                continue  # biases and norms can sit near zero, where a ratio means nothing
            ratios[name] = float(c.float().norm() / (p.float().norm() + 1e-12))
    return ratios


def measure(
    build_merged: Path,
    kind: str,
    artifact_dir: Path,
    base_dir: Path | None,
    registered_base: str | None,
    reference_tokenizer_dir: Path | None,
    tokenizer_change_declared: bool,
    production_merged: Path | None = None,
) -> dict:
    """Everything the health gates judge, in one JSON-ready report; weight scale is against production's merged model."""
    report: dict = {"kind": kind}
    if production_merged is not None:
        report["weight_scale_vs_production"] = weight_scale(build_merged, production_merged)
    weights = [Path(build_merged) / "model.safetensors"]
    if kind == ADAPTER:
        weights.append(Path(artifact_dir) / "adapter_model.safetensors")
    report["nonfinite_tensors"] = {w.parent.name + "/" + w.name: nonfinite_tensors(w) for w in weights}
    merged, merged_info = _loading_info(build_merged)
    report["merged_loading"] = merged_info
    tok = load_tokenizer(build_merged)
    rows = merged.get_input_embeddings().weight.shape[0]
    report["tokenizer"] = {"vocab_size": len(tok), "embedding_rows": int(rows), "change_declared": tokenizer_change_declared}
    if reference_tokenizer_dir is not None:
        ref = load_tokenizer(reference_tokenizer_dir)
        report["tokenizer"]["probe_id_mismatches"] = [t for t in PROBE_TEXTS if ref(t)["input_ids"] != tok(t)["input_ids"]]
    feeds = _probe_feeds(build_merged)
    try:
        with torch.no_grad():
            a = merged(**feeds).logits
            b = merged(**feeds).logits
    except (IndexError, RuntimeError) as e:  # e.g. token ids beyond the embedding table
        report["forward_error"] = f"{type(e).__name__}: {e}"
        report.update(
            probe_finite=False,
            probe_deterministic=False,
            gradients={"loss_finite": False, "nonfinite": [], "error": report["forward_error"]},
        )
        return report
    report["probe_finite"] = bool(torch.isfinite(a).all())
    report["probe_deterministic"] = bool(torch.equal(a, b))
    if kind == ADAPTER and base_dir is not None:
        base, base_info = _loading_info(Path(base_dir))
        report["base_loading"] = base_info
        report["adapter"] = adapter_fit(Path(artifact_dir), base, base_info.get("missing_keys", []), registered_base)
        with torch.no_grad():
            report["adapter"]["max_output_change"] = float((a - base(**feeds).logits).abs().max())
        base_sd, merged_sd = base.state_dict(), merged.state_dict()
        changes = {
            k: float((merged_sd[k] - v).norm() / (v.norm() + 1e-12))
            for k, v in base_sd.items()
            if k in merged_sd and v.dtype.is_floating_point and k not in base_info.get("missing_keys", [])
        }
        report["weight_norm_outliers"] = {
            k: round(v, 4) for k, v in sorted(changes.items(), key=lambda kv: -kv[1]) if v > NORM_OUTLIER_RATIO
        }
    merged.train()
    labels = torch.arange(len(PROBE_TEXTS)) % merged.config.num_labels
    loss = merged(**feeds, labels=labels).loss
    loss.backward()
    bad_grads = sorted(n for n, p in merged.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all())
    report["gradients"] = {"loss_finite": bool(torch.isfinite(loss)), "nonfinite": bad_grads}
    return report
