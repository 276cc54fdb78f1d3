"""Launching the gated job on the local Dagster instance and reading back its gate results."""

from __future__ import annotations

import importlib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from modelcd_assets.defs.assets.production_rollback import production_rollback, rollback_run_config
from modelcd_assets.defs.assets.rollout import NO_ROLLOUT, rollout_run_config
from modelcd_assets.defs.jobs import CALIBRATION_JOB, GATE_JOB, GATE_REPORT_JOB, ROLLBACK_JOB, ROLLOUT_JOB
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.gate_results import GateGraph, read_gates
from modelcd_assets.lib.errors import ModelcdError, RegistryUnavailable, Superseded
from modelcd_assets.lib.operations.processes import preserved_stop_signals
from modelcd_assets.lib.presentation.report import table
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.run_recovery import CANDIDATE, LAUNCHED_BY, ROLLBACK, process_tags, recover_dead_runs

PROMOTED, BLOCKED, SUPERSEDED, BAD_INPUT, ERROR = "promoted", "blocked", "superseded", "bad input", "error"
REGISTRY_UNAVAILABLE = "registry unavailable"
ROLLING_OUT = "rolling out"  # every gate passed, and the policy's rollout steps take it to production on live traffic


class RunFailed(Exception):
    """A run launched here failed for a reason other than the user's input (a bug, a crash, a full disk); nothing was decided."""


@dataclass
class GateRow:
    gate: str
    status: str  # pass / fail / inconclusive / not run / stale / no golden cases declared / ...
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
    report_error: str = ""  # why the candidate's gate_report page could not be written (the decision stands either way)
    error_type: type[BaseException] | None = None  # the failed step's exception class, when it is one of modelcd's (StepError.type)


def definitions() -> dg.Definitions:
    from modelcd_assets.definitions import defs

    return defs()


def code_location_graph() -> GateGraph:
    """The code location's gate graph, for readers outside a run (the CLI, the Python API, the benches); a run judges by the
    one it was loaded with (the gate_graph resource)."""
    return GateGraph.of(definitions())


def _row(record) -> GateRow:
    return GateRow(record.gate, record.shown, record.measured, record.threshold, record.reason)


# The exception classes a run's outcome is decided by, each with its subclasses; MLflow's only the registry raises.
_OUTCOME_OF = ((Superseded, SUPERSEDED), (RegistryUnavailable, REGISTRY_UNAVAILABLE), (ModelcdError, BAD_INPUT))
_TYPED_MODULES = ("modelcd_assets.", "mlflow.")


@dataclass(frozen=True)
class StepError:
    """The first failed step of a run and the exception it raised (inside Dagster's wrapper), as the run's events record it:
    the class's name and module (Dagster keeps the message as `module.Class: text`), and the text alone."""

    step: str
    cls_name: str = ""
    message: str = ""  # its first line, without the class's name
    module: str = "builtins"

    @classmethod
    def of(cls, result) -> StepError | None:
        for event in result.all_events:
            if event.event_type_value == "STEP_FAILURE":
                err = event.event_specific_data.error
                while err is not None and err.cause is not None and "DagsterExecutionStepExecutionError" in err.cls_name:
                    err = err.cause
                if err is None:
                    return cls(event.step_key)
                first = err.message.strip().splitlines()[0] if err.message and err.message.strip() else ""
                named = re.match(rf"(?:([\w.]+)\.)?{re.escape(err.cls_name)}(?:: |:?$)", first)
                return cls(
                    event.step_key,
                    err.cls_name,
                    first[named.end() :] if named else first,
                    (named.group(1) or "builtins") if named else "builtins",
                )
        return None

    @property
    def type(self) -> type[BaseException] | None:
        """The exception's class when it is modelcd's or MLflow's, found by its module and name; None for any other."""
        if not self.module.startswith(_TYPED_MODULES):
            return None
        try:
            found = getattr(importlib.import_module(self.module), self.cls_name, None)
        except ImportError:
            return None
        from mlflow.exceptions import MlflowException

        roots = tuple(t for t, _ in _OUTCOME_OF) + (MlflowException,)
        return found if isinstance(found, type) and issubclass(found, roots) else None

    @property
    def outcome(self) -> str:
        """What a run that failed with this error decided: superseded, registry unavailable, bad input, or error (nothing)."""
        from mlflow.exceptions import MlflowException

        t = self.type
        if t is None:
            return ERROR
        if issubclass(t, MlflowException):
            return REGISTRY_UNAVAILABLE
        return next((outcome for base, outcome in _OUTCOME_OF if issubclass(t, base)), ERROR)

    def __str__(self) -> str:
        return f"{self.step}: {self.cls_name}: {self.message}" if self.cls_name else self.step


def _failure_message(result) -> str:
    return str(StepError.of(result) or "")


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


def _terminal_logger(name: str, handler: logging.Handler, description: str) -> dg.LoggerDefinition:
    """A run's logger that sends its records to handler alone; its events still go to the instance's event log (the UI)."""

    def build(_init_context) -> logging.Logger:
        log = logging.getLogger(name)
        log.setLevel(logging.DEBUG)
        log.propagate = False
        log.handlers = [handler]
        return log

    return dg.LoggerDefinition(build, description=description)


def _progress_logger(bar) -> dg.LoggerDefinition:
    return _terminal_logger(f"modelcd.progress.{id(bar)}", _StepProgress(bar), "modelcd's terminal progress bar")


def _run_for(ref: CandidateRef, job: dg.JobDefinition, instance: dg.DagsterInstance, run_config: dict, logger: dg.LoggerDefinition | None):
    """Run job on ref's partition in this process, tagged as the CLI's; logger, when given, replaces Dagster's console log."""
    if logger is not None:
        job = job.with_logger_defs({"terminal": logger})
        run_config = {**run_config, "loggers": {"terminal": {}}}
    with preserved_stop_signals():
        return job.execute_in_process(
            instance=instance,
            partition_key=ref.key,
            run_config=run_config,
            raise_on_error=False,
            tags={CANDIDATE: ref.key, LAUNCHED_BY: "cli", **process_tags()},
        )


def run_gate(
    ref: CandidateRef, traffic_sample: str = "traffic_current", instance: dg.DagsterInstance | None = None, progress: bool = False
) -> GateRun:
    """Run the same job the registry sensor launches, in this process, on the configured instance.

    progress=True replaces Dagster's console log with one progress bar over the run's steps.
    """
    instance = instance or dg.DagsterInstance.get()
    recover_dead_runs(instance)
    d = definitions()
    add_candidate(instance, ref)
    run_config: dict = {"ops": {"drift_report": {"config": {"traffic_sample": traffic_sample}}}}
    job = d.resolve_job_def(GATE_JOB)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        steps = len(job.asset_layer.asset_graph.get_all_asset_keys()) + len(job.asset_layer.asset_graph.asset_check_keys)
        bar = tqdm(total=steps, desc=f"gating {ref.key}", unit="step")
    try:
        result = _run_for(ref, job, instance, run_config, _progress_logger(bar) if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    run = _judge(ref, result, [_row(r) for r in read_gates(instance, ref.key, GateGraph.of(d)).records])
    run.report_error = write_report(instance, ref, quiet=progress)
    if run.report_error:
        logging.getLogger(__name__).warning("the gate report of %s was not written: %s", ref.uri, run.report_error)
    return run


@dataclass
class Calibration:
    """What `modelcd calibrate` did: the set accepted or refused, what became of production, and the revision's gated run."""

    model: str
    refused: str = ""  # why the set was refused; the current set stays
    sha256: str = ""
    summary: dict = field(default_factory=dict)  # calibration_set's metadata
    action: str = ""  # lib/release/recalibration: registered, already registered, up to date, ...
    why: str = ""
    revision: CandidateRef | None = None
    gate: GateRun | None = None


def run_calibration(name: str, source: Path, instance: dg.DagsterInstance | None = None, gate: bool = True) -> Calibration:
    """Register a new calibration set for a model and re-quantize production under it (the `calibrate` job, in this process);
    with gate=True, gate the calibration revision as `modelcd gate` does."""
    instance = instance or dg.DagsterInstance.get()
    recover_dead_runs(instance)
    run_config = {"ops": {"calibration_set": {"config": {"model": name, "source": str(Path(source).expanduser().resolve())}}}}
    with preserved_stop_signals():
        result = (
            definitions()
            .resolve_job_def(CALIBRATION_JOB)
            .execute_in_process(instance=instance, run_config=run_config, raise_on_error=False, tags={LAUNCHED_BY: "cli", **process_tags()})
        )
    if not result.success:
        error = StepError.of(result)
        if error is not None and error.step == "calibration_set" and error.outcome == BAD_INPUT:
            return Calibration(name, refused=error.message)  # the reason alone, without the exception's name
        if error is not None and error.outcome == REGISTRY_UNAVAILABLE:
            raise RegistryUnavailable(error.message)  # the reason alone, as for a refused set
        # Not "the set was refused" (exit 2): a run that failed decided nothing.
        raise RunFailed(f"the calibrate run {result.run_id} failed: {error or 'see it in the Dagster UI'}")
    meta = lambda node: {k: getattr(v, "value", v) for k, v in result.asset_materializations_for_node(node)[0].metadata.items()}  # noqa: E731
    summary, plans = meta("calibration_set"), meta("calibration_revision")["plans"]
    plan = plans[name]
    out = Calibration(
        name,
        sha256=summary["sha256"],
        summary=summary,
        action=plan["action"],
        why=plan["why"],
        revision=CandidateRef(name, plan["revision"]) if plan["revision"] else None,
    )
    if gate and out.revision is not None:
        out.gate = run_gate(out.revision, instance=instance)
    return out


def add_candidate(instance: dg.DagsterInstance, ref: CandidateRef) -> str:
    """Make a registered version a partition of the gated assets on instance, as the registry sensor does; returns its key."""
    if not instance.has_dynamic_partition(candidates.name, ref.key):
        instance.add_dynamic_partitions(candidates.name, [ref.key])
    return ref.key


def _quiet_logger() -> dg.LoggerDefinition:
    return _terminal_logger("modelcd.quiet", logging.NullHandler(), "nothing on the terminal; the run's log is in the Dagster UI")


def write_report(instance: dg.DagsterInstance, ref: CandidateRef, quiet: bool = False) -> str:
    """Materialize the candidate's gate_report page, as gate_report_sensor does after the daemon's gated runs; quiet=True
    leaves Dagster's event lines off the terminal (they stay in the run's log in the UI).

    Returns why it could not be written ("" when it was); the gate decision does not depend on it.
    """
    result = _run_for(ref, definitions().resolve_job_def(GATE_REPORT_JOB), instance, {}, _quiet_logger() if quiet else None)
    return "" if result.success else (_failure_message(result) or "the gate_report run failed; see it in the Dagster UI")


def _judge(ref: CandidateRef, result, rows: list[GateRow]) -> GateRun:
    """The outcome of a finished gated run. The gate table is read back exactly as promotion reads it, so it can never
    show a pass promotion would refuse."""
    evaluated = {e.check_name for e in result.get_asset_check_evaluations()}
    rows = [
        (
            r
            if r.gate in evaluated or r.status != "not run"
            else GateRow(r.gate, "not run", reason="an earlier step failed or a gate blocked upstream")
        )
        for r in rows
    ]
    if any(e.asset_key == dg.AssetKey("production_model") for e in result.get_asset_materialization_events()):
        return GateRun(ref, PROMOTED, result.run_id, rows)
    if result.success and (started := _rollout_metadata(result)) and started.get("status") not in (None, NO_ROLLOUT):
        return GateRun(ref, ROLLING_OUT, result.run_id, rows, str(started.get("state", "")))
    error = StepError.of(result)
    outcome, error_type = (error.outcome, error.type) if error else (ERROR, None)
    if outcome == SUPERSEDED:
        return GateRun(ref, SUPERSEDED, result.run_id, rows, error.message, error_type=error_type)
    failed_gates = [r for r in rows if r.gate in evaluated and r.status not in ("pass", "no golden cases declared")]
    if failed_gates:
        return GateRun(ref, BLOCKED, result.run_id, rows, "; ".join(f"{r.gate}: {r.reason or r.status}" for r in failed_gates))
    if outcome == REGISTRY_UNAVAILABLE:  # the reason alone, without the exception's name
        return GateRun(ref, REGISTRY_UNAVAILABLE, result.run_id, rows, f"{error.step}: {error.message}", error_type=error_type)
    # BAD_INPUT: the user's input or environment (lib/errors.ModelcdError and its kinds); ERROR: a bug, a crash, nothing decided.
    return GateRun(ref, outcome, result.run_id, rows, str(error or "") or "the run failed; see it in the Dagster UI", error_type=error_type)


def _rollout_metadata(result) -> dict:
    """The rollout asset's metadata in a run ({} when the run did not materialize it)."""
    mats = [e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey("rollout")]
    if not mats:
        return {}
    return {k: getattr(v, "value", v) for k, v in mats[-1].event_specific_data.materialization.metadata.items()}


@dataclass
class RolloutMove:
    """What a rollout move did: the state it left (rollout's metadata), and whether the same run promoted."""

    ref: CandidateRef
    action: str
    run_id: str
    state: str
    status: str
    promoted: bool


def run_rollout_move(
    ref: CandidateRef,
    action: str,
    expected_sequence: int,
    *,
    analysis: dict | None = None,
    by: str = "cli",
    reason: str = "",
    instance: dg.DagsterInstance | None = None,
) -> RolloutMove:
    """Run the job rollout_sensor launches for a move, in this process: advance, pause, resume, abort or supersede ref's
    rollout, only over the state of sequence expected_sequence. A refusal raises the step's error (ModelcdError for the
    user's input, RolloutMoved when the state moved first)."""
    instance = instance or dg.DagsterInstance.get()
    recover_dead_runs(instance)
    add_candidate(instance, ref)
    job = definitions().resolve_job_def(ROLLOUT_JOB)
    config = rollout_run_config(action, expected_sequence, analysis or {}, by, reason)
    result = _run_for(ref, job, instance, config, _quiet_logger())
    if not result.success:
        error = StepError.of(result)
        if error is not None and error.type is not None and issubclass(error.type, ModelcdError):
            raise error.type(error.message)
        raise RunFailed(f"the rollout run {result.run_id} failed: {error or 'see it in the Dagster UI'}")
    meta = _rollout_metadata(result)
    promoted = any(e.asset_key == dg.AssetKey("production_model") for e in result.get_asset_materialization_events())
    if why := write_report(instance, ref, quiet=True):
        logging.getLogger(__name__).warning("the gate report of %s was not written: %s", ref.uri, why)
    return RolloutMove(ref, action, result.run_id, str(meta.get("state", "")), str(meta.get("status", "")), promoted)


def tick_rollouts(instance: dg.DagsterInstance, prometheus_url: str, cursor: str | None) -> tuple[str | None, list[RolloutMove]]:
    """One tick of rollout_sensor against the Prometheus at prometheus_url, and each move it asks for run in this process,
    as the daemon runs them: what `modelcd demo` drives its rollouts with, on steps of seconds the daemon's tick interval
    would stretch. Returns the sensor's new cursor and the moves made."""
    from modelcd_assets.defs.sensors.rollout_sensor import rollout_sensor
    from modelcd_assets.resources.prometheus import PrometheusResource

    resources = {**definitions().resources, "prometheus": PrometheusResource(url=prometheus_url)}
    result = rollout_sensor(dg.build_sensor_context(cursor=cursor, instance=instance, resources=resources))
    moves = []
    for request in result.run_requests or []:
        ref = CandidateRef.parse(request.partition_key)
        config = request.run_config["ops"]["rollout"]["config"]
        moves.append(
            run_rollout_move(
                ref,
                config["action"],
                config["expected_sequence"],
                analysis=json.loads(config["analysis"]),
                by=config["by"],
                reason=config["reason"],
                instance=instance,
            )
        )
    return result.cursor, moves


def latest_gate_rows(instance: dg.DagsterInstance, ref: CandidateRef, graph: GateGraph | None = None) -> tuple[list[GateRow], list[str]]:
    """The last stored result of every gate for one candidate, and what stops its promotion, exactly as promotion judges it."""
    decision = read_gates(instance, ref.key, graph or code_location_graph())
    return [_row(r) for r in decision.records], decision.problems


def run_rollback(name: str, from_version: str, reason: dict, instance: dg.DagsterInstance | None = None) -> dict:
    """Run the rollback job the SLO sensor launches, in this process; returns the materialization's metadata."""
    instance = instance or dg.DagsterInstance.get()
    recover_dead_runs(instance)
    with preserved_stop_signals():
        result = (
            definitions()
            .resolve_job_def(ROLLBACK_JOB)
            .execute_in_process(
                instance=instance,
                run_config=rollback_run_config(name, from_version, "manual", reason),
                raise_on_error=False,
                tags={ROLLBACK: f"{name}:{from_version}", LAUNCHED_BY: "cli", **process_tags()},
            )
        )
    if not result.success:
        error = StepError.of(result)
        raise ModelcdError((error.message if error else "") or "the rollback run failed; see it in the Dagster UI")
    mats = result.asset_materializations_for_node(production_rollback.op.name)
    return {k: getattr(v, "value", v) for k, v in mats[0].metadata.items()}


def print_gate_table(runs: list[tuple[str, GateRun]]) -> None:
    """The table `modelcd gate` and `modelcd demo` print: every gate of each labelled run, then each run's outcome."""
    rows = []
    for label, run in runs:
        for r in run.rows:
            rows.append([f"{label} ({run.ref.key})", r.gate, r.status.upper(), r.measured, r.threshold])
    print(table(["candidate", "gate", "result", "measured", "threshold"], rows))
    print()
    for label, run in runs:
        verdict = {PROMOTED: "PROMOTED to production", BLOCKED: "BLOCKED", ROLLING_OUT: "ROLLING OUT on live traffic"}.get(
            run.outcome, run.outcome.upper()
        )
        print(f"{label} {run.ref.key}: {verdict}" + (f": {run.error}" if run.error else ""))
