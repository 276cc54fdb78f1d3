"""production_model: moves the MLflow alias `production` to the candidate, after re-reading every gate."""

import json

import dagster as dg
from dagster._core.event_api import PartitionKeyFilter

from modelcd_assets.defs.assets.benchmark_results import benchmark_results
from modelcd_assets.defs.assets.drift_report import drift_report
from modelcd_assets.defs.assets.evaluation import evaluation
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.promotion import GateRecord, gate_problems
from modelcd_assets.lib.registry import CandidateRef
from modelcd_assets.resources.registry import MlflowRegistryResource


PRODUCTION_KEY = dg.AssetKey("production_model")


def required_gates(graph) -> list[dg.AssetCheckKey]:
    """Every blocking check on an asset upstream of production_model, in pipeline order (the order they run)."""
    upstream = graph.get_ancestor_asset_keys(PRODUCTION_KEY)
    stage = {key: i for i, key in enumerate(graph.toposorted_asset_keys)}
    gates = (k for k in graph.asset_check_keys if k.asset_key in upstream and graph.get_check_spec(k).blocking)
    return sorted(gates, key=lambda k: (stage[k.asset_key], k.name))


def code_location_graph():
    """The whole code location's asset graph, however this step was launched (a job, the UI, or in process)."""
    from modelcd_assets.definitions import defs

    return defs().resolve_asset_graph()


def gate_records(instance: dg.DagsterInstance, keys: list[dg.AssetCheckKey], partition: str) -> list[GateRecord]:
    """The latest stored result of each gate for one partition."""
    storage = instance.event_log_storage
    latest = storage.get_latest_asset_check_execution_by_key(keys, partition_filter=PartitionKeyFilter(key=partition))
    out = []
    for key in keys:
        rec = latest.get(key)
        if rec is None:
            out.append(GateRecord(key.name, None, None, False))
            continue
        # Only SUCCEEDED and FAILED records carry an evaluation; PLANNED ones carry the plan.
        evaluation_ = rec.evaluation if rec.status.value in ("SUCCEEDED", "FAILED") else None
        target = evaluation_.target_materialization_data if evaluation_ else None
        mat = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key.asset_key, asset_partitions=[partition]), limit=1).records
        current = bool(target and mat and target.storage_id == mat[0].storage_id)
        out.append(GateRecord(key.name, rec.status.value, evaluation_.passed if evaluation_ else None, current))
    return out


@dg.asset(partitions_def=candidates, deps=[evaluation, drift_report, benchmark_results], group_name="release", kinds={"mlflow"})
def production_model(context: dg.AssetExecutionContext, registry: MlflowRegistryResource) -> dg.MaterializeResult:
    """Refuses unless every gate's latest result for this candidate passed on current data."""
    ref = CandidateRef.parse(context.partition_key)
    keys = required_gates(code_location_graph())
    records = gate_records(context.instance, keys, context.partition_key)
    problems = gate_problems(records)
    if problems:
        raise ModelcdError(f"refusing to promote {ref.uri}: " + "; ".join(problems))
    reg = registry.registry()
    reason = {"run_id": context.run_id, "gates": {r.gate: "passed" for r in records}}
    previous = reg.move_production(ref, reason)
    context.log.info(f"production alias of {ref.name} moved from {previous.version if previous else 'nothing'} to {ref.version}")
    return dg.MaterializeResult(
        metadata={
            "production_version": ref.version,
            "previous_version": previous.version if previous else "none",
            "gates_verified": dg.MetadataValue.md("\n".join(f"- `{r.gate}`: passed" for r in records)),
            "reason": dg.MetadataValue.json(json.loads(json.dumps(reason))),
        }
    )
