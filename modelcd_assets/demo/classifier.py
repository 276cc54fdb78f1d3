"""The classifier's demo: all-MiniLM-L6-v2 as the base, a good and a worse ticket-intent adapter, and the gate judging them
three times (the good one promoted, the worse one blocked, the good one blocked again on shifted traffic)."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from modelcd_assets.demo import Phases, register_once, trained_adapter, write_policy
from modelcd_assets.launch import BLOCKED, PROMOTED, GateRun
from modelcd_assets.lib.classifier.base_model import prepare_minilm_base
from modelcd_assets.lib.classifier.training import train_adapter
from modelcd_assets.lib.demo.recipes import GOOD, WORSE, WORSE_TRAIN_EXAMPLES
from modelcd_assets.lib.demo.tickets import LABELS, write_splits
from modelcd_assets.lib.release.registry import CONTENT, Registry
from modelcd_assets.lib.splits import read_split
from modelcd_assets.lib.tasks.names import CLASSIFICATION, declaration_of

BASE_NAME = "ticket-intent-base"
MODEL_NAME = declaration_of(CLASSIFICATION).demo_model
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


def classifier_demo(reg: Registry, home: Path, phases: Phases) -> tuple[list[tuple[str, GateRun]], bool]:
    splits = write_splits(Path(os.environ["MODELCD_DATA"]))
    print(f"data: synthetic support tickets, {', '.join(f'{k} {len(read_split(v))}' for k, v in splits.items())}")
    write_policy(MODEL_NAME, POLICY)
    with phases.timed(CLASSIFICATION, "base"):
        base_dir = prepare_minilm_base(home / "work" / "base", list(LABELS))
        base_ref = register_once(reg, base_dir, BASE_NAME, role="base")
    print(f"base model: all-MiniLM-L6-v2 registered as {base_ref.uri}")
    train = read_split(splits["train"])
    adapters = {}
    folders = {label: home / "work" / "adapters" / label for label in ("good", "worse")}
    # The worse adapter goes on from the good one (lib/demo/recipes.py).
    for label, cfg, examples, start in (("good", GOOD, train, None), ("worse", WORSE, train[:WORSE_TRAIN_EXAMPLES], folders["good"])):
        fit = partial(train_adapter, base_dir, examples, cfg=cfg, base_uri=base_ref.uri, desc=f"training {label} adapter", start_from=start)
        adapters[label] = trained_adapter(reg, phases, CLASSIFICATION, label, folders[label], MODEL_NAME, fit)
        print(f"{label} adapter registered as {adapters[label].uri}")
    runs = [
        ("good", phases.gate(CLASSIFICATION, "gate good", adapters["good"])),
        ("worse", phases.gate(CLASSIFICATION, "gate worse", adapters["worse"])),
        (
            "good on shifted traffic",
            phases.gate(CLASSIFICATION, "gate good on shifted traffic", adapters["good"], traffic_sample="traffic_shifted"),
        ),
    ]
    prod = reg.production(MODEL_NAME)
    ok = runs[0][1].outcome == PROMOTED and runs[1][1].outcome == BLOCKED and runs[2][1].outcome == BLOCKED
    return runs, ok and prod is not None and reg.tags(prod)[CONTENT] == reg.tags(adapters["good"])[CONTENT]
