"""Launching the gated job on the local Dagster instance and reading back its gate results."""

from __future__ import annotations

from dataclasses import dataclass, field

import dagster as dg
from dagster._core.event_api import PartitionKeyFilter

from modelcd_assets.defs.assets.production_model import code_location_graph, required_gates
from modelcd_assets.defs.jobs import GATE_JOB
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.registry import CandidateRef

PROMOTED, BLOCKED, BAD_INPUT, ERROR = "promoted", "blocked", "bad input", "error"


@dataclass
class GateRow:
    gate: str
    status: str  # pass / fail / inconclusive / not run
    measured: str = ""
    threshold: str = ""
    reason: str = ""


@dataclass
class GateRun:
    ref: CandidateRef
    outcome: str
    run_id: str
    rows: list[GateRow] = field(default_factory=list)
    error: str = ""


def definitions() -> dg.Definitions:
    from modelcd_assets.definitions import defs

    return defs()


def _row(gate: str, evaluation) -> GateRow:
    md = {k: getattr(v, "value", v) for k, v in evaluation.metadata.items()}
    status = str(md.get("status", "pass" if evaluation.passed else "fail"))
    return GateRow(gate, status, str(md.get("measured", "")), str(md.get("threshold", "")), str(md.get("reason", "")))


def _failure_message(result) -> str:
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            err = event.event_specific_data.error
            while err is not None and err.cause is not None and "DagsterExecutionStepExecutionError" in err.cls_name:
                err = err.cause
            return f"{event.step_key}: {err.cls_name}: {err.message.strip().splitlines()[0] if err.message else ''}" if err else event.step_key
    return ""


def run_gate(ref: CandidateRef, traffic_sample: str = "traffic_current", instance: dg.DagsterInstance | None = None) -> GateRun:
    """Run the same job the registry sensor launches, in this process, on the configured instance."""
    instance = instance or dg.DagsterInstance.get()
    d = definitions()
    if not instance.has_dynamic_partition(candidates.name, ref.key):
        instance.add_dynamic_partitions(candidates.name, [ref.key])
    run_config = {"ops": {"drift_report": {"config": {"traffic_sample": traffic_sample}}}}
    result = d.resolve_job_def(GATE_JOB).execute_in_process(
        instance=instance, partition_key=ref.key, run_config=run_config, raise_on_error=False,
        tags={"modelcd/candidate": ref.key, "modelcd/launched_by": "cli"},
    )
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    rows = []
    for key in required_gates(d.resolve_asset_graph()):
        ev = evaluations.get(key.name)
        if ev is None:
            rows.append(GateRow(key.name, "not run", reason="an earlier step failed or a gate blocked upstream"))
            continue
        rows.append(_row(key.name, ev))
    if any(e.asset_key == dg.AssetKey("production_model") for e in result.get_asset_materialization_events()):
        return GateRun(ref, PROMOTED, result.run_id, rows)
    failed_gates = [r for r in rows if r.status in ("fail", "inconclusive")]
    message = _failure_message(result)
    if failed_gates:
        return GateRun(ref, BLOCKED, result.run_id, rows, "; ".join(f"{r.gate}: {r.reason}" for r in failed_gates))
    if any(name in message for name in ("BadCandidate", "ModelcdError")):
        return GateRun(ref, BAD_INPUT, result.run_id, rows, message)
    return GateRun(ref, ERROR, result.run_id, rows, message or "the run failed; see it in the Dagster UI")


def latest_gate_rows(instance: dg.DagsterInstance, ref: CandidateRef) -> list[GateRow]:
    """The last stored result of every gate for one candidate."""
    keys = required_gates(code_location_graph())
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(keys, partition_filter=PartitionKeyFilter(key=ref.key))
    rows = []
    for key in keys:
        rec = latest.get(key)
        ev = rec.evaluation if rec else None
        if ev is None:
            rows.append(GateRow(key.name, "not run" if rec is None else rec.status.value.lower()))
            continue
        rows.append(_row(key.name, ev))
    return rows
