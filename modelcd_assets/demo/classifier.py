"""The classifier's demo: all-MiniLM-L6-v2 as the base, a good and a worse ticket-intent adapter, and the gate judging them:
the good one's snapshot partway through its training promoted as the first version, the good one rolled out against it
through shadow and canary steps on live traffic, the worse one blocked, the good one blocked again on shifted traffic."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from modelcd_assets.demo import Phases, register_once, trained_adapter, write_policy
from modelcd_assets.demo.live import gate_and_roll_out
from modelcd_assets.launch import BLOCKED, PROMOTED, GateRun
from modelcd_assets.lib.classifier.base_model import prepare_minilm_base
from modelcd_assets.lib.classifier.training import train_adapter
from modelcd_assets.lib.demo.recipes import FIRST_PRODUCTION_STEP, GOOD, WORSE, WORSE_TRAIN_EXAMPLES
from modelcd_assets.lib.demo.tickets import LABELS, write_splits
from modelcd_assets.lib.release.registry import CONTENT, Registry
from modelcd_assets.lib.splits import read_split
from modelcd_assets.lib.tasks.names import CLASSIFICATION, declaration_of
from modelcd_assets.live_rollout import live_server
from modelcd_assets.serving.loadgen import CLASSIFY

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
serving:
  poll_seconds: 1  # how soon the server follows the alias and the rollout's steps
rollout:
  # Steps of seconds, so that the demo shows each one; a real policy's last minutes (see lib/judging/rollout_policy.py).
  # A step's clock starts when the gated run starts the rollout, and the demo's callers ask a second or two later (the
  # load generator took 7 s to start before it stopped importing MLflow, and at 4 s the shadow step ended before any of
  # them had asked): at 6 s the shadow step had 301 pairs and the canary step 925 requests in its smaller arm.
  min_samples: 20
  steps:
    # A shadow copy is answered after production's answer, beside the next requests: on a machine of few cores its latency
    # is not the candidate's own. The shadow step judges the pairs and the errors; the canary step, where each arm answers
    # callers of its own, judges latency too.
    - shadow: 0.5
      for: 6s
      metrics: [error_rate, nan_rate, label_agreement, confidence_shift]
    # A canary step passes the error and NaN rates only once each is bounded within a point of production's (about 420
    # answers an arm without one): a busy machine may take longer than 6 s to answer them, and the step waits for them.
    - canary: 0.5
      for: 6s
      max_for: 60s
    - promote
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
    folders = {label: home / "work" / "adapters" / label for label in ("earlier", "good", "worse")}
    # The first production is the good adapter as it stood partway through its training; the worse adapter goes on from the
    # good one (lib/demo/recipes.py).
    recipes = (
        ("good", GOOD, train, None, {FIRST_PRODUCTION_STEP: folders["earlier"]}),
        ("worse", WORSE, train[:WORSE_TRAIN_EXAMPLES], folders["good"], {}),
    )
    for label, cfg, examples, start, snapshots in recipes:
        fit = partial(
            train_adapter,
            base_dir,
            examples,
            cfg=cfg,
            base_uri=base_ref.uri,
            desc=f"training {label} adapter",
            start_from=start,
            snapshots=snapshots,
        )
        adapters[label] = trained_adapter(
            reg, phases, CLASSIFICATION, label, folders[label], MODEL_NAME, fit, snapshots=tuple(snapshots.values())
        )
        print(f"{label} adapter registered as {adapters[label].uri}")
    adapters["earlier"] = register_once(reg, folders["earlier"], MODEL_NAME)
    print(f"earlier adapter (the good one after {FIRST_PRODUCTION_STEP} of {GOOD.steps} steps) registered as {adapters['earlier'].uri}")
    runs = []
    if reg.production(MODEL_NAME) is None:  # a demo run before left production in place
        runs.append(("earlier (first version)", phases.gate(CLASSIFICATION, "gate earlier", adapters["earlier"])))
    texts = [ex.text for ex in read_split(splits["traffic_current"])]
    with live_server(MODEL_NAME, home / "work" / "live" / MODEL_NAME) as live:
        batches = [texts[i : i + 1 + i % 4] for i in range(0, len(texts), 4)]
        runs.append(("good", gate_and_roll_out(reg, phases, CLASSIFICATION, "good", adapters["good"], live, CLASSIFY, batches)))
    runs += [
        ("worse", phases.gate(CLASSIFICATION, "gate worse", adapters["worse"])),
        (
            "good on shifted traffic",
            phases.gate(CLASSIFICATION, "gate good on shifted traffic", adapters["good"], traffic_sample="traffic_shifted"),
        ),
    ]
    outcomes = {label: run.outcome for label, run in runs}
    expected = {"good": PROMOTED, "worse": BLOCKED, "good on shifted traffic": BLOCKED}
    ok = all(outcome == PROMOTED for label, outcome in outcomes.items() if label.startswith("earlier"))
    ok = ok and all(outcomes[label] == outcome for label, outcome in expected.items())
    prod = reg.production(MODEL_NAME)
    return runs, ok and prod is not None and reg.tags(prod)[CONTENT] == reg.tags(adapters["good"])[CONTENT]
