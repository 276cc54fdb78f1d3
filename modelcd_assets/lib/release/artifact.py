"""What a candidate folder is: a peft LoRA adapter or a full Hugging Face model."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from modelcd_assets.lib.errors import BadCandidate

ADAPTER = "adapter"
FULL = "full"


@dataclass(frozen=True)
class ArtifactInfo:
    kind: str  # ADAPTER or FULL
    declared_base: str | None  # adapters only: adapter_config.json's base_model_name_or_path


def inspect_artifact(folder: Path) -> ArtifactInfo:
    """Classify a candidate folder without loading any weights."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BadCandidate(f"{folder} is not a folder; pass a peft adapter folder or a Hugging Face model folder")
    if (folder / "adapter_config.json").is_file():
        if not (folder / "adapter_model.safetensors").is_file():
            raise BadCandidate(
                f"{folder} has adapter_config.json but no adapter_model.safetensors; save the adapter with safe_serialization=True"
            )
        try:
            cfg = json.loads((folder / "adapter_config.json").read_text())
        except json.JSONDecodeError as e:
            raise BadCandidate(f"{folder / 'adapter_config.json'} is not valid JSON: {e}") from e
        return ArtifactInfo(ADAPTER, cfg.get("base_model_name_or_path"))
    if (folder / "config.json").is_file():
        if not (folder / "model.safetensors").is_file():
            raise BadCandidate(f"{folder} has config.json but no model.safetensors; save the model with safe_serialization=True")
        return ArtifactInfo(FULL, None)
    raise BadCandidate(
        f"{folder} is neither a peft adapter folder (adapter_config.json + adapter_model.safetensors) "
        "nor a Hugging Face model folder (config.json + model.safetensors)"
    )
