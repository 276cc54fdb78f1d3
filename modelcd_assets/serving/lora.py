"""Unmerged LoRA on a shared base model, with the adapter chosen per request (a context variable).

peft's set_adapter flips module state for every caller at once; here an adapter is an immutable
bundle of tensors bound to the calling request, so two requests on two threads can use two
adapters on the same base weights, and a request never sees a mix.
"""

from __future__ import annotations

import contextvars
import json
import math
from contextlib import contextmanager
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from modelcd_assets.lib.errors import BadCandidate

PREFIX = "base_model.model."
_ACTIVE: contextvars.ContextVar["LoraAdapter | None"] = contextvars.ContextVar("modelcd_lora_adapter", default=None)

# adapter_config.json settings this runtime does not implement; an adapter using one is refused, not mis-served.
_UNSUPPORTED = {
    "use_dora": False, "fan_in_fan_out": False, "bias": "none", "lora_bias": False, "alpha_pattern": {}, "rank_pattern": {},
    "layer_replication": None, "trainable_token_indices": None, "target_parameters": None, "use_qalora": False,
}


@dataclass(frozen=True)
class LoraAdapter:
    """One adapter's weights: low-rank pairs per Linear module, and whole-module replacements (the saved head)."""

    name: str
    content_hash: str
    scale: float
    pairs: dict[str, tuple[torch.Tensor, torch.Tensor]]
    replaced: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    # Own copies of the replaced modules, made by install(); never shared, so threads cannot see each other's weights.
    copies: dict[str, nn.Module] = field(default_factory=dict)

    @property
    def modules(self) -> set[str]:
        return set(self.pairs) | set(self.replaced)


def read_adapter(folder: Path, name: str, content_hash: str) -> LoraAdapter:
    """Read a peft LoRA folder (safetensors only) into a LoraAdapter; unsupported LoRA variants are refused."""
    from safetensors.torch import load_file

    folder = Path(folder)
    try:
        cfg = json.loads((folder / "adapter_config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise BadCandidate(f"{folder}/adapter_config.json cannot be read: {e}") from e
    if cfg.get("peft_type") != "LORA":
        raise BadCandidate(f"{folder} is a {cfg.get('peft_type')} adapter; the server hot-swaps LoRA adapters only")
    for key, plain in _UNSUPPORTED.items():
        value = cfg.get(key)
        if value not in (None, False, {}, []) and value != plain:
            raise BadCandidate(f"{folder}: adapter_config.json sets {key}={cfg[key]!r}, which the server does not implement; serve the merged model instead")
    r, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
    scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
    state = load_file(str(folder / "adapter_model.safetensors"))
    a_b: dict[str, dict[str, torch.Tensor]] = {}
    replaced: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in state.items():
        path = key[len(PREFIX):] if key.startswith(PREFIX) else key
        for part in ("lora_A", "lora_B"):
            marker = f".{part}.weight"
            if path.endswith(marker):
                a_b.setdefault(path[: -len(marker)], {})[part] = tensor.float()
                break
        else:
            module, _, param = path.rpartition(".")
            replaced.setdefault(module, {})[param] = tensor.float()
    pairs = {}
    for module, parts in a_b.items():
        if set(parts) != {"lora_A", "lora_B"}:
            raise BadCandidate(f"{folder}: module {module} has {sorted(parts)} but LoRA needs both lora_A and lora_B")
        if parts["lora_A"].shape[0] != r or parts["lora_B"].shape[1] != r:
            raise BadCandidate(f"{folder}: module {module} has LoRA rank {parts['lora_A'].shape[0]}, config says r={r}")
        pairs[module] = (parts["lora_A"].contiguous(), parts["lora_B"].contiguous())
    if not pairs:
        raise BadCandidate(f"{folder} holds no LoRA weights (no *.lora_A.weight / *.lora_B.weight tensors)")
    return LoraAdapter(name, content_hash, scale, pairs, replaced)


class LoraLinear(nn.Module):
    """A base Linear plus the low-rank update of whichever adapter the current request is bound to."""

    def __init__(self, base: nn.Linear, path: str):
        super().__init__()
        self.base, self.path = base, path

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        adapter = _ACTIVE.get()
        pair = adapter.pairs.get(self.path) if adapter is not None else None
        if pair is None:
            return out
        a, b = pair
        return out + (x @ a.T) @ b.T * adapter.scale


class Replaceable(nn.Module):
    """A module whose parameters an adapter may replace wholesale (peft's modules_to_save, e.g. the head)."""

    def __init__(self, base: nn.Module, path: str):
        super().__init__()
        self.base, self.path = base, path

    def forward(self, *args, **kwargs):
        adapter = _ACTIVE.get()
        # Not torch.func.functional_call: it swaps the shared module's parameters in place, so a
        # request on another thread would run with this adapter's head.
        module = adapter.copies.get(self.path) if adapter is not None else None
        return (module or self.base)(*args, **kwargs)


def install(model: nn.Module, adapter: LoraAdapter) -> None:
    """Wrap the modules the adapter touches (once per module); requests bound to other adapters pass through."""
    for path in sorted(adapter.modules):
        parent_path, _, attr = path.rpartition(".")
        try:
            parent = model.get_submodule(parent_path) if parent_path else model
            module = getattr(parent, attr)
        except AttributeError as e:
            raise BadCandidate(f"adapter {adapter.name} targets {path}, which the base model does not have; it was trained on another base") from e
        if path in adapter.pairs:
            if isinstance(module, Replaceable):
                raise BadCandidate(f"adapter {adapter.name} puts LoRA on {path}, which another loaded adapter replaces whole; unload that one first")
            linear = module.base if isinstance(module, LoraLinear) else module
            if not isinstance(linear, nn.Linear):
                raise BadCandidate(f"adapter {adapter.name} puts LoRA on {path}, a {type(linear).__name__}; the server supports LoRA on Linear layers")
            a, b = adapter.pairs[path]
            if a.shape[1] != linear.in_features or b.shape[0] != linear.out_features:
                raise BadCandidate(f"adapter {adapter.name}: LoRA on {path} is {b.shape[0]}x{a.shape[1]}, the base layer is {linear.out_features}x{linear.in_features}")
            if not isinstance(module, LoraLinear):
                setattr(parent, attr, LoraLinear(module, path))
        else:
            if isinstance(module, LoraLinear):
                raise BadCandidate(f"adapter {adapter.name} replaces {path} whole, where another loaded adapter puts LoRA; unload that one first")
            inner = module.base if isinstance(module, Replaceable) else module
            own = dict(inner.named_parameters())
            wanted = adapter.replaced[path]
            if set(wanted) != set(own) or any(wanted[k].shape != own[k].shape for k in own):
                raise BadCandidate(f"adapter {adapter.name} replaces {path} with parameters {sorted(wanted)} that do not fit the base's {sorted(own)}")
            copy = deepcopy(inner)
            copy.load_state_dict(wanted, strict=True)
            adapter.copies[path] = copy.eval().requires_grad_(False)
            if not isinstance(module, Replaceable):
                setattr(parent, attr, Replaceable(module, path))


@contextmanager
def bound(adapter: LoraAdapter | None):
    """Serve everything inside with adapter (None: the bare base model)."""
    token = _ACTIVE.set(adapter)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
