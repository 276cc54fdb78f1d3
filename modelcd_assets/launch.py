"""Launching the gated job on the local Dagster instance and reading back its gate results."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import dagster as dg
from dagster._core.event_api import PartitionKeyFilter

from modelcd_assets.defs.assets.production_model import code_location_graph, required_gates
from modelcd_assets.defs.assets.production_rollback import production_rollback, rollback_run_config
from modelcd_assets.defs.jobs import GATE_JOB, ROLLBACK_JOB
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.errors import ModelcdError
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


class _StepProgress(logging.Handler):
    """Advances a progress bar on every finished step and names the step running."""

    def __init__(self, bar):
        super().__init__(logging.DEBUG)
        self.bar = bar

    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "dagster_meta", None) or {}
        event = meta.get("dagster_event") if isinstance(meta, dict) else None
        kind = getattr(event, "event_type_value", "")
        if kind in ("STEP_SUCCESS", "STEP_FAILURE", "STEP_SKIPPED"):
            self.bar.update(1)
            self.bar.set_postfix_str(f"{meta.get('step_key') or event.step_key} {kind.split('_')[1].lower()}")
        elif kind == "STEP_START":
            self.bar.set_postfix_str(f"{event.step_key} running")


def _progress_logger(bar) -> dg.LoggerDefinition:
    def build(_init_context) -> logging.Logger:
        log = logging.getLogger(f"modelcd.progress.{id(bar)}")
        log.setLevel(logging.DEBUG)
        log.propagate = False
        log.handlers = [_StepProgress(bar)]
        return log

    return dg.LoggerDefinition(build, description="modelcd's terminal progress bar")


def run_gate(ref: CandidateRef, traffic_sample: str = "traffic_current", instance: dg.DagsterInstance | None = None, progress: bool = False) -> GateRun:
    """Run the same job the registry sensor launches, in this process, on the configured instance.

    progress=True replaces Dagster's console log with one progress bar over the run's steps.
    """
    instance = instance or dg.DagsterInstance.get()
    d = definitions()
    if not instance.has_dynamic_partition(candidates.name, ref.key):
        instance.add_dynamic_partitions(candidates.name, [ref.key])
    run_config: dict = {"ops": {"drift_report": {"config": {"traffic_sample": traffic_sample}}}}
    job = d.resolve_job_def(GATE_JOB)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        steps = len(job.asset_layer.asset_graph.get_all_asset_keys()) + len(job.asset_layer.asset_graph.asset_check_keys)
        bar = tqdm(total=steps, desc=f"gating {ref.key}", unit="step")
        job = job.with_logger_defs({"progress": _progress_logger(bar)})
        run_config["loggers"] = {"progress": {}}
    try:
        result = job.execute_in_process(
            instance=instance, partition_key=ref.key, run_config=run_config, raise_on_error=False,
            tags={"modelcd/candidate": ref.key, "modelcd/launched_by": "cli"},
        )
    finally:
        if bar is not None:
            bar.close()
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
        ev = rec.evaluation if rec and rec.status.value in ("SUCCEEDED", "FAILED") else None
        if ev is None:
            rows.append(GateRow(key.name, "not run" if rec is None or rec.status.value == "PLANNED" else rec.status.value.lower()))
            continue
        rows.append(_row(key.name, ev))
    return rows


def run_rollback(name: str, from_version: str, reason: dict, instance: dg.DagsterInstance | None = None) -> dict:
    """Run the rollback job the SLO sensor launches, in this process; returns the materialization's metadata."""
    instance = instance or dg.DagsterInstance.get()
    result = definitions().resolve_job_def(ROLLBACK_JOB).execute_in_process(
        instance=instance, run_config=rollback_run_config(name, from_version, "manual", reason), raise_on_error=False,
        tags={"modelcd/rollback": f"{name}:{from_version}", "modelcd/launched_by": "cli"},
    )
    if not result.success:
        raise ModelcdError(_failure_message(result).split(": ", 2)[-1] or "the rollback run failed; see it in the Dagster UI")
    mats = result.asset_materializations_for_node(production_rollback.op.name)
    return {k: getattr(v, "value", v) for k, v in mats[0].metadata.items()}
