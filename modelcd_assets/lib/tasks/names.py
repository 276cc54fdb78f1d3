"""The tasks modelcd knows, and how a registered folder declares its own: torch-free, the registry and the server read it."""

from __future__ import annotations

import json
from pathlib import Path

from modelcd_assets.lib.errors import ModelcdError

CLASSIFICATION = "classification"
CAUSAL_LM = "causal-lm"
TASKS = (CLASSIFICATION, CAUSAL_LM)
# Versions registered before tasks existed are classifiers: the only kind modelcd gated then.
DEFAULT_TASK = CLASSIFICATION


def require_task(task: str) -> str:
    if task not in TASKS:
        raise ModelcdError(
            f"unknown task {task!r}; modelcd gates {' and '.join(TASKS)} models (register with --task {TASKS[0]} or --task {TASKS[1]})"
        )
    return task


def task_of_folder(folder: Path) -> str:
    """The task a model folder's config declares: a *ForCausalLM architecture is a causal LM, anything else a classifier."""
    config = Path(folder) / "config.json"
    architectures = json.loads(config.read_text()).get("architectures") or [] if config.is_file() else []
    return CAUSAL_LM if any(str(a).endswith("ForCausalLM") for a in architectures) else CLASSIFICATION


def task_of_adapter(folder: Path) -> str | None:
    """The task a peft adapter declares (task_type CAUSAL_LM or SEQ_CLS); None when it declares none."""
    config = Path(folder) / "adapter_config.json"
    task_type = json.loads(config.read_text()).get("task_type") if config.is_file() else None
    return {"CAUSAL_LM": CAUSAL_LM, "SEQ_CLS": CLASSIFICATION}.get(str(task_type)) if task_type else None
