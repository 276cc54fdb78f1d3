"""The one reader of gate results: promotion, rollback, `modelcd status`, the server's admin API and the benches decide from it.

A result counts only if it was evaluated on the candidate's current lineage, all the way up: the check targeted the
latest materialization of the asset it guards, and every asset upstream was built from its parents' latest versions.
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from modelcd_assets.lib.promotion import GateRecord, gate_problems, lineage_problems

PRODUCTION_KEY = dg.AssetKey("production_model")


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


def required_gates(graph) -> list[dg.AssetCheckKey]:
    """Every blocking check on an asset upstream of production_model, in pipeline order (the order they run)."""
    upstream = graph.get_ancestor_asset_keys(PRODUCTION_KEY)
    stage = {key: i for i, key in enumerate(graph.toposorted_asset_keys)}
    gates = (k for k in graph.asset_check_keys if k.asset_key in upstream and graph.get_check_spec(k).blocking)
    return sorted(gates, key=lambda k: (stage[k.asset_key], k.name))


def code_location_graph():
    """The code location's asset graph, for readers outside a run (the CLI, the server); a run uses its own job's graph."""
    from modelcd_assets.definitions import defs

    return defs().resolve_asset_graph()


def _latest(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str | None):
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None), limit=1).records
    return records[0] if records else None


def _lineage(instance: dg.DagsterInstance, graph, partition: str) -> list[str]:
    """Problems with the lineage of every asset upstream of production_model, for this candidate."""
    upstream = graph.get_ancestor_asset_keys(PRODUCTION_KEY)
    assets = [k for k in graph.toposorted_asset_keys if k in upstream]
    latest = {k: _latest(instance, k, partition if graph.get(k).is_partitioned else None) for k in assets}
    parents = {}
    for key in assets:
        if not graph.get(key).is_partitioned:
            continue
        # Unpartitioned parents (calibration_set) are shared by every model; which set a candidate was calibrated with
        # is pinned on the version and recorded by quantized_model, so a newer set does not make its build outdated.
        parents[key.to_user_string()] = [p.to_user_string() for p in graph.get(key).parent_keys if p in latest and graph.get(p).is_partitioned]
    ids = {k.to_user_string(): (r.storage_id if r else None) for k, r in latest.items() if graph.get(k).is_partitioned}
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


def read_gates(instance: dg.DagsterInstance, partition: str, graph=None) -> GateDecision:
    """The latest result of every required gate for one candidate, judged exactly as promotion judges it."""
    graph = graph if graph is not None else code_location_graph()
    keys = required_gates(graph)
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
        records.append(GateRecord(key.name, status, passed, info.is_current, _text(evaluation, "status"),
                                  _text(evaluation, "measured"), _text(evaluation, "threshold"), _text(evaluation, "reason")))
    return GateDecision(partition, records, _lineage(instance, graph, partition))
