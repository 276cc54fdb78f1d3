"""`modelcd demo`: MiniLM base, two LoRA adapters, and the gated pipeline judging both."""

from __future__ import annotations

import os
import time
from pathlib import Path

from modelcd_assets.launch import BLOCKED, PROMOTED, GateRun, run_gate
from modelcd_assets.lib.demo.recipes import GOOD, WORSE, WORSE_TRAIN_EXAMPLES
from modelcd_assets.lib.demo.tickets import LABELS, write_splits
from modelcd_assets.lib.hashing import folder_manifest, manifest_hash
from modelcd_assets.lib.judging.policy import policy_path
from modelcd_assets.lib.model.base_model import prepare_minilm_base
from modelcd_assets.lib.model.training import train_adapter
from modelcd_assets.lib.presentation.report import table
from modelcd_assets.lib.release.registry import CONTENT, CandidateRef, Registry
from modelcd_assets.lib.release.signing import init_keys
from modelcd_assets.lib.splits import read_split

BASE_NAME = "ticket-intent-base"
MODEL_NAME = "ticket-intent"
POLICY = """\
# Gate policy for ticket-intent (defaults spelled out; see modelcd_assets/lib/judging/policy.py).
accuracy:
  tolerance_points: 0.3
  absolute_floor: 0.75
  alpha: 0.05
int8_fidelity:
  min_top1_agreement: 0.99
drift:
  prediction_threshold: 0.1
  input_numeric_threshold: 0.1
  input_drift_share: 0.5
throughput:
  min_ratio: 0.88
  p99_slo_ms: 100
golden:
  - text: "i was charged twice for my subscription fee. thanks."
    label: billing
  - text: "my parcel is still missing, where is my delivery?"
    label: shipping
"""


def register_once(reg: Registry, folder: Path, name: str, **kw) -> CandidateRef:
    """Reuse the version whose content matches folder, so repeated demos don't pile up versions."""
    content = manifest_hash(folder_manifest(folder))
    try:
        existing = reg.versions(name)
    except Exception:
        existing = []
    for ref in existing:
        if reg.tags(ref).get(CONTENT) == content:
            return ref
    return reg.register(folder, name, **kw)


def print_gate_table(runs: list[tuple[str, GateRun]]) -> None:
    rows = []
    for label, run in runs:
        for r in run.rows:
            rows.append([f"{label} ({run.ref.key})", r.gate, r.status.upper(), r.measured, r.threshold])
    print(table(["candidate", "gate", "result", "measured", "threshold"], rows))
    print()
    for label, run in runs:
        verdict = {PROMOTED: "PROMOTED to production", BLOCKED: "BLOCKED"}.get(run.outcome, run.outcome.upper())
        print(f"{label} {run.ref.key}: {verdict}" + (f": {run.error}" if run.error else ""))


def main() -> int:
    started = time.perf_counter()
    home = Path(os.environ["MODELCD_HOME"])
    reg = Registry.from_env()
    print(f"modelcd demo: state in {home}")
    if not reg.keys.private.exists():  # what 'modelcd keys init' does: registrations and verdicts are signed with it
        init_keys(reg.keys)
        print(f"signing key pair created: {reg.keys.private}, {reg.keys.public}")
    splits = write_splits(Path(os.environ["MODELCD_DATA"]))
    print(f"data: synthetic support tickets, {', '.join(f'{k} {len(read_split(v))}' for k, v in splits.items())}")
    policy_file = policy_path(Path(os.environ["MODELCD_POLICY_DIR"]), MODEL_NAME)
    if not policy_file.exists():
        policy_file.write_text(POLICY)
    base_dir = prepare_minilm_base(home / "work" / "base", list(LABELS))
    base_ref = register_once(reg, base_dir, BASE_NAME, role="base")
    print(f"base model: all-MiniLM-L6-v2 registered as {base_ref.uri}")
    train = read_split(splits["train"])
    adapters = {}
    for label, cfg, examples in (("good", GOOD, train), ("worse", WORSE, train[:WORSE_TRAIN_EXAMPLES])):
        folder = home / "work" / "adapters" / label
        if not (folder / "adapter_model.safetensors").is_file():
            train_adapter(base_dir, examples, folder, cfg, base_ref.uri, desc=f"training {label} adapter")
        adapters[label] = register_once(reg, folder, MODEL_NAME)
        print(f"{label} adapter registered as {adapters[label].uri}")
    runs = [("good", run_gate(adapters["good"], progress=True)), ("worse", run_gate(adapters["worse"], progress=True)),
            ("good on shifted traffic", run_gate(adapters["good"], traffic_sample="traffic_shifted", progress=True))]
    print()
    print_gate_table(runs)
    prod = reg.production(MODEL_NAME)
    print(f"\nproduction alias of {MODEL_NAME}: version {prod.version if prod else 'none'}")
    print(f"demo finished in {time.perf_counter() - started:.0f} s; see it all with 'make ui'")
    ok = runs[0][1].outcome == PROMOTED and runs[1][1].outcome == BLOCKED and runs[2][1].outcome == BLOCKED
    good_in_production = prod is not None and reg.tags(prod)[CONTENT] == reg.tags(adapters["good"])[CONTENT]
    return 0 if ok and good_in_production else 1
