"""The gates the tasks declare (lib/tasks/names.Gate): one blocking check per gate name, on the asset the declarations name,
required of the candidates of every task that declares it and judged by that task's verdict method. A task declared
later (a plugin: lib/tasks/names) gets its gates here without a line of this file changing. definitions.py adds them to
what the defs folder holds."""

import dagster as dg

from modelcd_assets.defs.assets.benchmark_results import benchmark_results
from modelcd_assets.defs.assets.candidate import candidate
from modelcd_assets.defs.assets.drift_report import drift_report
from modelcd_assets.defs.assets.evaluation import evaluation
from modelcd_assets.defs.assets.merged_model import merged_model
from modelcd_assets.defs.assets.onnx_model import onnx_model
from modelcd_assets.defs.assets.quantized_model import quantized_model
from modelcd_assets.defs.checks.verdict import check_result, for_tasks, not_applicable
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.names import GATE_ASSETS, Gate, declarations
from modelcd_assets.lib.tasks.task import task_of
from modelcd_assets.resources.state import LocalStateResource

_ASSETS = {
    a.key.to_user_string(): a for a in (candidate, merged_model, onnx_model, quantized_model, evaluation, drift_report, benchmark_results)
}
if missing := set(GATE_ASSETS) - set(_ASSETS):
    raise ModelcdError(f"lib/tasks/names.GATE_ASSETS names {sorted(missing)}, which the gated graph does not define")


def _gate_check(name: str, by_task: dict[str, Gate]) -> dg.AssetChecksDefinition:
    first = next(iter(by_task.values()))
    judges = " ".join(dict.fromkeys(g.judges for g in by_task.values()))

    @dg.asset_check(
        asset=_ASSETS[first.asset],
        name=name,
        blocking=True,
        partitions_def=candidates,
        description=judges,
        metadata=for_tasks(*by_task),
    )
    def _check(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
        record = state.record(CandidateRef.parse(context.partition_key))
        gate = by_task.get(record.task)
        if gate is None:
            return not_applicable(name, record.task)
        return check_result(getattr(task_of(record.task), gate.verdict)(record, state))

    return _check


def _declared_gates() -> dict[str, dict[str, Gate]]:
    gates: dict[str, dict[str, Gate]] = {}
    for declaration in declarations():
        for gate in declaration.gates:
            gates.setdefault(gate.name, {})[declaration.name] = gate
    return gates


def task_gate_checks() -> list[dg.AssetChecksDefinition]:
    """A check per gate the tasks declared when the code location is loaded (definitions.py calls this on every load, so a task
    declared after this module was imported has its gates). Fails closed: a declared task whose implementation lacks a step,
    or the verdict method a gate names, is refused here with its name, before a candidate of it could be gated without it."""
    for declared in declarations():
        task_of(declared.name)
    return [_gate_check(name, by_task) for name, by_task in _declared_gates().items()]
