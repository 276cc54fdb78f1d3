"""Adapter slots: the LoRA weights an INT8 base graph takes as inputs, so one base serves every adapter of it.

Every adapter of a base fills the same slots, so they share its rank and target modules. A slot is named as the ONNX
Runtime GenAI builder names the LoRA weight (`model.layers.0.attn.q_proj.lora_A.MatMul.weight`, shaped [in, rank];
lora_B: [rank, out], with alpha/rank folded in); `peft_key` names the same weight in a peft adapter file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from modelcd_assets.lib.errors import BadCandidate

SLOT = re.compile(r"^model\.layers\.(\d+)\.(attn|mlp)\.(\w+)\.lora_([AB])\.MatMul\.weight$")
# What the builder calls a Llama block's attention, as transformers names it.
_MODULE_PARENT = {"attn": "self_attn", "mlp": "mlp"}
# The projections the builder can give LoRA slots: a Llama block's attention and MLP.
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class AdapterSlots:
    rank: int
    targets: tuple[str, ...]
    shapes: dict[str, tuple[int, int]]  # slot name -> shape

    @classmethod
    def of(cls, rank: int, targets: tuple[str, ...], initializers: dict[str, tuple[int, ...]]) -> "AdapterSlots":
        """The slots among a graph's initializers (name -> shape); the builder must have made one pair per target module."""
        shapes = {name: tuple(int(d) for d in shape) for name, shape in initializers.items() if SLOT.match(name)}
        found = {SLOT.match(name).group(3) for name in shapes}
        if not shapes or found != set(targets):
            raise BadCandidate(
                f"the base build has LoRA slots for {sorted(found) or 'no module'}, not for the targets {sorted(targets)}; "
                f"choose targets among the decoder's projections ({', '.join(TARGETS)})"
            )
        return cls(int(rank), tuple(sorted(targets)), dict(sorted(shapes.items())))

    @staticmethod
    def peft_key(slot: str) -> str:
        """The key of this slot's weight in a peft adapter_model.safetensors."""
        layer, parent, module, part = SLOT.match(slot).groups()
        return f"base_model.model.model.layers.{layer}.{_MODULE_PARENT[parent]}.{module}.lora_{part}.weight"

    def to_dict(self) -> dict:
        return {"rank": self.rank, "targets": list(self.targets), "shapes": {k: list(v) for k, v in self.shapes.items()}}

    @classmethod
    def from_dict(cls, data: dict) -> "AdapterSlots":
        return cls(int(data["rank"]), tuple(data["targets"]), {k: tuple(v) for k, v in data["shapes"].items()})

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2))

    @classmethod
    def read(cls, path: Path) -> "AdapterSlots":
        return cls.from_dict(json.loads(Path(path).read_text()))
