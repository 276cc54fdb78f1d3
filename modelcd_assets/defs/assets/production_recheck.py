"""production_recheck: production's throughput and p99 timed again, against the figures its throughput gate recorded."""

from datetime import datetime, timezone

import dagster as dg

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.inference.benchmark import SAMPLE_TEXTS
from modelcd_assets.lib.judging.gates import Verdict
from modelcd_assets.lib.release.monitoring import judge_each, recorded
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.task import task_of
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource

BATCHES = ("1", "32")  # the batch sizes the classifier's throughput gate recorded (a causal LM's: its concurrencies)
METHOD = (
    "production's chosen INT8 model (a causal LM: its INT8 base with its adapter), timed against itself in interleaved trials (as the"
    " throughput gate times a first candidate), on the gate's evaluation texts; the median of all trials is compared with the median the"
    " gate recorded. A recorded figure from another time is not an interleaved pair, so there is no paired CI: only a fall below"
    " throughput.min_ratio x recorded, or a p99 over the SLO, fails."
)


def _measure(prod: CandidateRef, state: LocalStateResource, policy: PolicyResource) -> Verdict:
    record = state.record(prod)
    if not state.files(prod).benchmark.is_file():
        raise FileNotFoundError(
            f"{state.files(prod).benchmark} is missing: {prod.uri} has no recorded throughput to compare with; "
            f"run 'modelcd gate {prod.name} {prod.version}'"
        )
    return task_of(record.task).recheck(record, state, policy.for_model(prod.name))


def _cells(v: Verdict) -> str:
    """The table's cells: each recorded batch (a causal LM: concurrency) in order, then p99; n/a where nothing was measured."""
    n = v.numbers
    if "p99_ms" not in n:
        return " | ".join("n/a" for _ in (*BATCHES, "p99"))
    keys = sorted(
        (k[1 : -len("_items_per_s")] for k in n if k.startswith("b") and k.endswith("_items_per_s") and "recorded" not in k), key=int
    )
    speed = [f"{n[f'b{b}_items_per_s']:.0f} / {n[f'b{b}_recorded_items_per_s']:.0f} ({n[f'b{b}_ratio']:.2f}x)" for b in keys]
    return " | ".join([*speed, *(["n/a"] * (len(BATCHES) - len(speed))), f"{n['p99_ms']:.1f}"])


@dg.asset(group_name="monitoring", kinds={"onnx"})
def production_recheck(
    context: dg.AssetExecutionContext, registry: MlflowRegistryResource, policy: PolicyResource, state: LocalStateResource
) -> dg.MaterializeResult:
    """Each production model's INT8 artifact timed as its gate timed it: a slower node or library shows as a fall from the recorded
    figures."""
    productions = registry.registry().productions()
    verdicts = judge_each(
        productions,
        lambda model, prod: _measure(prod, state, policy),
        gate="production_recheck",
        not_done="not measured",
        unable="could not re-measure",
        errors=(ModelcdError, FileNotFoundError, ValueError),
        log=context.log.info,
    )
    rows = "\n".join(f"| {m} | {productions[m].version} | {v.status} | {_cells(v)} |" for m, v in verdicts.items())
    table = (
        "| model | production | status | b1 items/s now / recorded | b32 items/s now / recorded | p99 b1 ms |\n|---|---|---|---|---|---|\n"
        + rows
        if verdicts
        else "no registered model has a production version: nothing to re-measure"
    )
    return dg.MaterializeResult(
        metadata={
            "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "models": len(verdicts),
            "method": METHOD,
            "texts": SAMPLE_TEXTS,
            "results": dg.MetadataValue.md(table),
            "reasons": dg.MetadataValue.md("\n".join(f"- **{m}**: {v.reason}" for m, v in verdicts.items()) or "none"),
            # What production_still_meets_its_gate judges, exactly as decided here.
            "verdicts": dg.MetadataValue.json(recorded(productions, verdicts)),
        }
    )
