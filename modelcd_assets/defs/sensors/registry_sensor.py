"""registry_sensor: every new version of a candidate registered model becomes a partition and a gated run."""

import json

import dagster as dg

from modelcd_assets.defs.jobs import gate_candidate
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.resources.registry import MlflowRegistryResource


def new_versions(registry, cursor: dict[str, dict]) -> tuple[list[CandidateRef], dict[str, dict], set[str]]:
    """Versions not gated yet, oldest first, the advanced cursor, and the models re-created since the cursor was written.

    The cursor holds, per model, its creation time and the highest version seen. A model deleted and re-created restarts
    its version numbers with other bytes: every version of it is new, even under a number that was gated before.
    """
    created = registry.candidate_models_created()
    found, advanced, recreated = [], {}, set()
    for name, refs in registry.candidate_versions(created).items():  # the models listed once, for both
        seen = cursor.get(name)
        if isinstance(seen, int):  # a cursor written before creation times were kept: trust the number
            seen = {"created": created.get(name, 0), "version": seen}
        if seen is not None and seen.get("created") != created.get(name, 0):
            recreated.add(name)
            seen = None
        top = seen["version"] if seen else 0
        advanced[name] = {"created": created.get(name, 0), "version": top}
        for ref in refs:
            if int(ref.version) > top:
                found.append(ref)
                advanced[name]["version"] = max(advanced[name]["version"], int(ref.version))
    return found, advanced, recreated


@dg.sensor(job=gate_candidate, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def registry_sensor(context: dg.SensorEvaluationContext, registry: MlflowRegistryResource) -> dg.SensorResult:
    """Cursor: each registered model's creation time and highest version seen; run_key NAME:VERSION@CREATED so nothing launches twice.

    A version that already has a partition was gated before (by `modelcd gate` or an earlier sensor), so it is not launched
    again, unless its model was deleted and re-created since: then the number names other bytes, and it is gated anew.
    """
    cursor = json.loads(context.cursor) if context.cursor else {}
    refs, advanced, recreated = new_versions(registry.registry(), cursor)
    refs = [r for r in refs if r.name in recreated or not context.instance.has_dynamic_partition(candidates.name, r.key)]
    if recreated:
        context.log.warning(f"re-created since the last tick, so every version is gated anew: {', '.join(sorted(recreated))}")
    if not refs:
        return dg.SensorResult(
            skip_reason=f"no new candidate versions (cursor {advanced or 'empty'})", cursor=json.dumps(advanced, sort_keys=True)
        )
    new_keys = sorted({r.key for r in refs if not context.instance.has_dynamic_partition(candidates.name, r.key)})
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(run_key=f"{r.key}@{advanced[r.name]['created']}", partition_key=r.key, tags={"modelcd/candidate": r.key})
            for r in refs
        ],
        dynamic_partitions_requests=[candidates.build_add_request(new_keys)] if new_keys else [],
        cursor=json.dumps(advanced, sort_keys=True),
    )
