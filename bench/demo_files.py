"""Where the demo left what the benches measure: its data splits, MiniLM base and good LoRA adapter."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from modelcd_assets.lib.judging.policy import policy_path
from modelcd_assets.lib.operations.settings import apply_local_defaults


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


def new_demo_model(kind: str) -> tuple[str, str, DemoFiles] | None:
    """A registered-model name new to this run (ticket-intent-KIND-TIME) with the demo's policy copied to it, the run's
    stamp, and the demo's files; None (with a hint on stderr) before `make demo`."""
    import shutil
    import time

    from modelcd_assets.demo.classifier import MODEL_NAME

    found = demo_files()
    if found is None:
        return None
    policy = policy_path(Path(apply_local_defaults()["MODELCD_POLICY_DIR"]), MODEL_NAME)
    if not policy.is_file():
        print(f"{policy} is missing; run 'make demo' first", file=sys.stderr)
        return None
    stamp = time.strftime("%Y%m%d%H%M%S")
    name = f"{MODEL_NAME}-{kind}-{stamp}"
    shutil.copy(policy, policy_path(policy.parent, name))
    return name, stamp, found
