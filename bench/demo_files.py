"""Where the demo left what the benches measure: its data splits, MiniLM base and good LoRA adapter."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from modelcd_assets.lib.settings import apply_local_defaults


@dataclass(frozen=True)
class DemoFiles:
    data: Path
    base: Path
    adapter: Path


def demo_files() -> DemoFiles | None:
    """The demo's files under MODELCD_HOME; None (with a hint on stderr) before `make demo`."""
    env = apply_local_defaults()
    home = Path(env["MODELCD_HOME"])
    found = DemoFiles(Path(env["MODELCD_DATA"]), home / "work" / "base", home / "work" / "adapters" / "good")
    if not (found.adapter / "adapter_model.safetensors").is_file():
        print("the demo's good adapter is missing; run 'make demo' first", file=sys.stderr)
        return None
    return found
