"""The one reader of gate results: promotion, `modelcd status` and `modelcd verdict`, the Python API and the benches decide from it.

A result counts only if it was evaluated on the candidate's current lineage, all the way up: the check targeted the
latest materialization of the asset it guards, and every asset upstream was built from its parents' latest versions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import dagster as dg

from modelcd_assets.lib.judging.promotion import GateRecord, gate_problems, lineage_problems
from modelcd_assets.lib.release import attestation, servable
from modelcd_assets.lib.tasks.names import DEFAULT_TASK, declaration_of

PRODUCTION_KEY = dg.AssetKey("production_model")
CANDIDATE_KEY = dg.AssetKey("candidate")  # its materialization records the candidate's task
GATE_GRAPH_RESOURCE = "gate_graph"  # the GateGraph resource definitions.py binds
TASKS_METADATA = "modelcd/tasks"  # on a check's spec: the tasks it judges, comma-separated (absent: every task)


@dataclass(frozen=True)
class GateDecision:
    """Every required gate's latest result for one candidate, and whether promotion would go ahead."""

    partition: str
    records: list[GateRecord]
    lineage: list[str]

    @property
    def problems(self) -> list[str]:
        return gate_problems(self.records, self.lineage)

    @property
    def promotable(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class GateGraph:
    """What the gate readers need of the code location's asset graph: each asset's parents, which assets are partitioned,
    and every check's blocking flag.

    Built once, where the code location is defined (definitions.py), from Dagster's public API (Definitions.assets and
    asset_checks; AssetsDefinition.asset_deps, partitions_def and check_specs), and handed to the assets that judge gates as
    the `gate_graph` resource: a run reads gate results by the graph it was loaded with, and never loads the code location
    again. A job's own asset layer would not do: the gate report's job holds gate_report alone."""

    parents: Mapping[dg.AssetKey, frozenset[dg.AssetKey]]
    partitioned: frozenset[dg.AssetKey]
    blocking: Mapping[dg.AssetCheckKey, bool]
    tasks: Mapping[dg.AssetCheckKey, frozenset[str]] = field(default_factory=dict)  # a check absent here judges every task

    @classmethod
    def of(cls, definitions: dg.Definitions) -> GateGraph:
        parents: dict[dg.AssetKey, frozenset[dg.AssetKey]] = {}
        partitioned: set[dg.AssetKey] = set()
        blocking: dict[dg.AssetCheckKey, bool] = {}
        tasks: dict[dg.AssetCheckKey, frozenset[str]] = {}
        for d in (*definitions.assets, *definitions.asset_checks):
            if isinstance(d, dg.AssetsDefinition):
                deps, partitions = d.asset_deps, d.partitions_def
                for spec in d.check_specs:
                    blocking[spec.key] = spec.blocking
                    if (declared := (spec.metadata or {}).get(TASKS_METADATA)) is not None:
                        tasks[spec.key] = frozenset(str(getattr(declared, "value", declared)).split(","))
            elif isinstance(d, dg.AssetSpec):  # an asset declared, not materialized here
                deps, partitions = {d.key: {dep.asset_key for dep in d.deps}}, d.partitions_def
            elif isinstance(d, dg.SourceAsset):
                deps, partitions = {d.key: set()}, d.partitions_def
            else:
                raise TypeError(
                    f"the code location holds {d!r}, which the gate graph cannot read; define it as an asset, an AssetSpec or a check"
                )
            for key, upstream in deps.items():
                parents[key] = frozenset(upstream)
                if partitions is not None:
                    partitioned.add(key)
        return cls(parents, frozenset(partitioned), blocking, tasks)

    def ancestors(self, key: dg.AssetKey) -> set[dg.AssetKey]:
        found: set[dg.AssetKey] = set()
        todo = list(self.parents.get(key, ()))
        while todo:
            k = todo.pop()
            if k not in found:
                found.add(k)
                todo.extend(self.parents.get(k, ()))
        return found

    def pipeline_order(self, keys) -> list[dg.AssetKey]:
        """keys in the order a run executes them: by topological level, then by key within a level, as Dagster sorts them."""
        levels: dict[dg.AssetKey, int] = {}

        def level(k: dg.AssetKey) -> int:
            if k not in levels:  # a parent defined nowhere here is a root, at level 0, as in Dagster's graph
                levels[k] = 1 + max((level(p) for p in self.parents.get(k, ())), default=-1)
            return levels[k]

        return sorted(keys, key=lambda k: (level(k), k))


def required_gates(graph: GateGraph, task: str | None = None) -> list[dg.AssetCheckKey]:
    """Every blocking check on an asset upstream of production_model, in pipeline order (the order they run); with a task,
    those that judge it (a check declares its tasks in its metadata, or judges every task)."""
    upstream = graph.ancestors(PRODUCTION_KEY)
    stage = {key: i for i, key in enumerate(graph.pipeline_order(upstream))}
    gates = (
        k
        for k, blocking in graph.blocking.items()
        if k.asset_key in upstream and blocking and (task is None or task in graph.tasks.get(k, frozenset({task})))
    )
    return sorted(gates, key=lambda k: (stage[k.asset_key], k.name))


def _latest(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str | None):
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None), limit=1
    ).records
    return records[0] if records else None


def _lineage(instance: dg.DagsterInstance, graph: GateGraph, partition: str, of: dg.AssetKey) -> list[str]:
    """Problems with the lineage of every asset upstream of `of` (production_model, or the rollout that precedes it), for this
    candidate."""
    assets = graph.pipeline_order(graph.ancestors(of))
    latest = {k: _latest(instance, k, partition if k in graph.partitioned else None) for k in assets}
    parents = {}
    for key in assets:
        if key not in graph.partitioned:
            continue
        # Unpartitioned parents (calibration_set) are shared by every model; which set a candidate was calibrated with
        # is pinned on the version and recorded by quantized_model, so a newer set does not make its build outdated.
        parents[key.to_user_string()] = [p.to_user_string() for p in sorted(graph.parents[key]) if p in latest and p in graph.partitioned]
    ids = {k.to_user_string(): r.storage_id if r else None for k, r in latest.items() if k in graph.partitioned}
    return lineage_problems(ids, parents)


def _evaluations(instance: dg.DagsterInstance, run_ids: set[str], partition: str) -> dict[tuple[str, dg.AssetCheckKey], object]:
    """The check evaluations these runs recorded for the partition, by run and check."""
    found = {}
    for run_id in run_ids:
        for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
            evaluation = entry.dagster_event.event_specific_data
            if evaluation.partition == partition:
                found[(run_id, evaluation.asset_check_key)] = evaluation
    return found


def _text(evaluation, key: str) -> str:
    value = evaluation.metadata.get(key) if evaluation is not None else None
    return str(getattr(value, "value", value)) if value is not None else ""


def candidate_task(instance: dg.DagsterInstance, partition: str) -> str:
    """The task the candidate's latest fetch recorded (the version's modelcd.task tag); a candidate never fetched, or
    fetched before tasks were recorded, is a classifier. A wrong answer never promotes: a gate that judges another task
    reports "not applicable", and a required gate that does is a problem (lib/judging/promotion.gate_problems)."""
    record = _latest(instance, CANDIDATE_KEY, partition)
    value = record.asset_materialization.metadata.get("task") if record and record.asset_materialization else None
    return str(getattr(value, "value", value)) if value is not None else DEFAULT_TASK


def read_gates(instance: dg.DagsterInstance, partition: str, graph: GateGraph, of: dg.AssetKey = PRODUCTION_KEY) -> GateDecision:
    """The latest result of every gate the candidate's task requires, judged exactly as promotion judges it.

    graph: inside a run, the `gate_graph` resource; outside one, launch.code_location_graph(). of: the asset about to act on
    the decision, whose own materializations are not part of the lineage judged (the rollout asset, starting a rollout)."""
    task = candidate_task(instance, partition)
    keys = required_gates(graph, task)
    infos = {i.check_key: i for i in instance.event_log_storage.get_asset_check_partition_info(keys, partition_keys=[partition])}
    evaluations = _evaluations(instance, {i.latest_planned_run_id for i in infos.values() if i.latest_planned_run_id}, partition)
    records = []
    for key in keys:
        info = infos.get(key)
        if info is None:
            records.append(GateRecord(key.name, None, None, False))
            continue
        status = info.latest_execution_status.value
        evaluation = evaluations.get((info.latest_planned_run_id, key)) if status in ("SUCCEEDED", "FAILED") else None
        if status in ("SUCCEEDED", "FAILED") and evaluation is None:
            status = "UNREADABLE"  # the run that recorded it is gone: not a pass
        passed = evaluation.passed if evaluation is not None else None
        records.append(
            GateRecord(
                key.name,
                status,
                passed,
                info.is_current,
                _text(evaluation, "status"),
                _text(evaluation, "measured"),
                _text(evaluation, "threshold"),
                _text(evaluation, "reason"),
            )
        )
    # A gate its task declares that modelcd's gated graph lacks (a code location loaded before the task was declared) never
    # ran: not a pass. (A graph without the candidate asset is not a gated graph of tasks: a test's own chain of assets.)
    if CANDIDATE_KEY in graph.parents:
        records += [GateRecord(name, None, None, False) for name in sorted(_declared_gates(task) - {k.name for k in keys})]
    return GateDecision(partition, records, _lineage(instance, graph, partition, of))


def _declared_gates(task: str) -> set[str]:
    return {g.name for g in declaration_of(task).gates}


def gate_verdict(reg, ref, record, decision: GateDecision, run_id: str, extra: dict | None = None):
    """The verdict a promotion (or a rollout's start) signs: the digests of the bytes about to be used, hashed now, every gate's
    result as read back, and the production it was judged against."""
    return attestation.Verdict(
        ref.name,
        ref.version,
        servable.subjects(reg, ref, record),
        [
            {"gate": r.gate, "verdict": r.shown, "measured": r.measured, "threshold": r.threshold, "reason": r.reason}
            for r in decision.records
        ],
        (
            {"version": record.production_version, attestation.REGISTERED_FILES: record.production_content_hash}
            if record.production_version
            else None
        ),
        attestation.policy_sha256(record.policy),
        run_id,
        dict(extra or {}),
    )
