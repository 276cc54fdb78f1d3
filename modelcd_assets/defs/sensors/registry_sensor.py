"""registry_sensor: every new version of a candidate registered model becomes a partition and a gated run."""

import json

import dagster as dg

from modelcd_assets.defs.jobs import gate_candidate
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.registry import CandidateRef
from modelcd_assets.resources.registry import MlflowRegistryResource


def new_versions(registry, cursor: dict[str, int]) -> tuple[list[CandidateRef], dict[str, int]]:
    """Versions above each model's cursor, oldest first, and the advanced cursor."""
    found, advanced = [], dict(cursor)
    for name, refs in registry.candidate_versions().items():
        for ref in refs:
            if int(ref.version) > cursor.get(name, 0):
                found.append(ref)
                advanced[name] = max(advanced.get(name, 0), int(ref.version))
    return found, advanced


@dg.sensor(job=gate_candidate, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def registry_sensor(context: dg.SensorEvaluationContext, registry: MlflowRegistryResource) -> dg.SensorResult:
    """Cursor: the highest version seen per registered model; run_key NAME:VERSION so nothing launches twice.

    A version that already has a partition was gated before (by `modelcd gate` or an earlier sensor), so it is not launched again.
    """
    cursor = json.loads(context.cursor) if context.cursor else {}
    refs, advanced = new_versions(registry.registry(), cursor)
    keys = [r.key for r in refs if not context.instance.has_dynamic_partition(candidates.name, r.key)]
    if not keys:
        return dg.SensorResult(skip_reason=f"no new candidate versions (cursor {advanced or 'empty'})", cursor=json.dumps(advanced, sort_keys=True))
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=k, partition_key=k, tags={"modelcd/candidate": k}) for k in keys],
        dynamic_partitions_requests=[candidates.build_add_request(keys)],
        cursor=json.dumps(advanced, sort_keys=True),
    )
