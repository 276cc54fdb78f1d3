"""The clean controls every task's fault suite builds from: byte-identical copies of production, production's adapter with
its base's files copied beside it, and adapters retrained from production's base with other seeds. Each must be promoted."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from modelcd_assets.faults.builders import base_files_copied, identical
from modelcd_assets.faults.catalog import Control
from modelcd_assets.faults.sandbox import Sandbox

CONTROL_SEEDS = 100  # retrained control i trains with seed CONTROL_SEEDS + i (the demo's production used seed 0)


def identical_controls(sb: Sandbox, n: int) -> list[Control]:
    return [(f"identical-{i}", "byte-identical", identical(sb.prod, sb.work / f"identical-{i}").folder) for i in range(1, n + 1)]


def retrained_controls(sb: Sandbox, n: int, train: Callable[..., Path], examples: list, recipe) -> list[Control]:
    """n adapters retrained from production's base with recipe (a dataclass with a seed), control i with seed
    CONTROL_SEEDS + i. train is the task's adapter trainer: (base_dir, examples, out_dir, recipe, base_uri, desc) -> out_dir."""
    controls = []
    for i in range(1, n + 1):
        folder, seed = sb.work / f"retrained-{i}", CONTROL_SEEDS + i
        trained = train(
            sb.prod.base, examples, folder, replace(recipe, seed=seed), sb.prod.base_uri, desc=f"training control {folder.name}"
        )
        controls.append((f"retrained-{i}", f"retrained, seed {seed}", trained))
    return controls


def base_files_control(sb: Sandbox) -> list[Control]:
    """Production's adapter with its base's tokenizer and config files copied beside it, byte for byte (an adapter production only)."""
    if not sb.prod.is_adapter:
        return []
    return [("base-files", "base's tokenizer and config files copied", base_files_copied(sb.prod, sb.work / "base-files", sb.task).folder)]
