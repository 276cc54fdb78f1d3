"""A candidate's own build: its peft LoRA weights as an ONNX Runtime adapter file (.onnx_adapter) for its base's slots.

Read without torch (lib/weights.py; float16 and bfloat16 widened to float32, exactly), and nothing in the adapter is executed. A slot's
weight is laid out as
the builder lays it (A transposed to [in, rank], B to [rank, out] times alpha/rank), so the adapter on the INT8 base is
the same function as the adapter unmerged in torch + peft. An adapter that does not fill the slots exactly (another
rank, other targets, another base's shapes, extra trained modules) is reported, never padded or cut to fit.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from modelcd_assets.lib.causal_lm.slots import AdapterSlots
from modelcd_assets.lib.errors import BadCandidate
from modelcd_assets.lib.weights import read_tensors

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_FILE = "adapter.onnx_adapter"


@dataclass
class AdapterFit:
    rank: int
    targets: list[str]
    scaling: float
    declared_base: str | None
    problems: list[str] = field(default_factory=list)  # every reason it does not fit, as a user reads it
    slots_filled: int = 0
    missing: list[str] = field(default_factory=list)  # slots with no weight in the adapter
    extra: list[str] = field(default_factory=list)  # adapter weights that fill no slot
    mismatched: list[str] = field(default_factory=list)  # weights whose shape is not their slot's

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "targets": self.targets,
            "scaling": self.scaling,
            "declared_base": self.declared_base,
            "problems": self.problems,
            "slots_filled": self.slots_filled,
            "missing": self.missing,
            "extra": self.extra,
            "mismatched": self.mismatched,
        }


def _targets(config: dict) -> list[str]:
    targets = config.get("target_modules") or []
    return sorted([targets] if isinstance(targets, str) else targets)


def adapter_parameters(adapter_dir: Path, slots: AdapterSlots) -> tuple[dict[str, np.ndarray], AdapterFit]:
    """The slot name -> FP32 array of an adapter folder, and how it fits the slots; parameters are empty when it does not."""
    adapter_dir = Path(adapter_dir)
    if not (adapter_dir / ADAPTER_CONFIG).is_file() or not (adapter_dir / ADAPTER_WEIGHTS).is_file():
        raise BadCandidate(
            f"{adapter_dir} is not a peft LoRA adapter: it needs {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS} (PeftModel.save_pretrained writes"
            " both)"
        )
    config = json.loads((adapter_dir / ADAPTER_CONFIG).read_text())
    rank, alpha = int(config.get("r", 0)), float(config.get("lora_alpha", 0))
    scaling = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / max(rank, 1)
    fit = AdapterFit(rank, _targets(config), scaling, config.get("base_model_name_or_path"))
    if config.get("peft_type", "LORA") != "LORA" or config.get("use_dora"):
        fit.problems.append(
            f"a {config.get('peft_type')}{' (DoRA)' if config.get('use_dora') else ''} adapter: the base's slots take plain LoRA only"
        )
    if rank != slots.rank:
        fit.problems.append(
            f"rank {rank}, but every adapter of this base has rank {slots.rank} (the slots' fixed shape); train with r={slots.rank}"
        )
    if fit.targets != sorted(slots.targets):
        fit.problems.append(
            f"targets {fit.targets}, but the base's slots are for {sorted(slots.targets)}; train with"
            f" target_modules={sorted(slots.targets)}"
        )
    if config.get("modules_to_save"):
        fit.problems.append(f"it also trains {config['modules_to_save']} in full (modules_to_save), which no slot can carry")
    weights = read_tensors(adapter_dir / ADAPTER_WEIGHTS)
    wanted = {slots.peft_key(slot): slot for slot in slots.shapes}
    fit.extra = sorted(k for k in weights if k not in wanted)
    if fit.extra:
        fit.problems.append(f"{len(fit.extra)} weight(s) that fill no slot, e.g. {fit.extra[0]}")
    params: dict[str, np.ndarray] = {}
    for key, slot in wanted.items():
        if key not in weights:
            fit.missing.append(key)
            continue
        value = np.ascontiguousarray(weights[key].astype(np.float32).T)
        if slot.split(".")[-3] == "lora_B":
            value = value * np.float32(scaling)
        if tuple(value.shape) != slots.shapes[slot]:
            fit.mismatched.append(f"{key} is {list(weights[key].shape)}, the slot takes {list(reversed(slots.shapes[slot]))}")
            continue
        params[slot] = value
    if fit.missing:
        fit.problems.append(f"no weight for {len(fit.missing)} of the base's {len(wanted)} slots, e.g. {fit.missing[0]}")
    if fit.mismatched:
        fit.problems.append(
            f"{fit.mismatched[0]}{f' (and {len(fit.mismatched) - 1} more)' if len(fit.mismatched) > 1 else ''}: "
            "the adapter was trained for another base (another hidden size)"
        )
    fit.slots_filled = len(params)
    return ({} if fit.problems else params), fit


def write_adapter_file(params: dict[str, np.ndarray], path: Path) -> Path:
    """Write the parameters as an ONNX Runtime adapter file, atomically."""
    import onnxruntime as ort

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = ort.AdapterFormat()
    fmt.set_adapter_version(1)
    fmt.set_model_version(1)
    # OrtValue wraps an array without copying it: the arrays and their OrtValues stay referenced until the file is written.
    values = {name: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(value, np.float32)) for name, value in params.items()}
    fmt.set_parameters(values)
    tmp = path.with_name(path.name + ".tmp")
    fmt.export_adapter(str(tmp))
    del values
    tmp.replace(path)
    return path


def scan_adapter_file(path: Path) -> dict:
    """What a CPU computes with in the base build's LoRA slots, read back from the adapter file that is served: per tensor,
    the subnormal floats (a slow path of floating-point hardware on the same graph), NaN and Inf. A float16 value below
    float16's normal range is a normal float32 once widened, so only the served float32 values are scanned."""
    import onnxruntime as ort

    tiny = np.finfo(np.float32).tiny
    params = ort.AdapterFormat.read_adapter(str(path)).get_parameters()
    per_tensor, values = {}, 0
    for name, value in sorted(params.items()):
        v = value.numpy()
        values += v.size
        counts = {
            "subnormal": int(np.count_nonzero((v != 0) & (np.abs(v) < tiny))),
            "nan": int(np.isnan(v).sum()),
            "inf": int(np.isinf(v).sum()),
        }
        if any(counts.values()):
            per_tensor[name] = counts
    totals = {k: sum(c[k] for c in per_tensor.values()) for k in ("subnormal", "nan", "inf")}
    return {"file": Path(path).name, "tensors": len(params), "values": values, **totals, "per_tensor": per_tensor}
