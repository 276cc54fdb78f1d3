"""production_model: moves the MLflow alias `production` to the candidate, after re-reading every gate."""

import json

import dagster as dg

from modelcd_assets.defs.assets.benchmark_results import benchmark_results
from modelcd_assets.defs.assets.drift_report import drift_report
from modelcd_assets.defs.assets.evaluation import evaluation
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.gate_results import GateGraph, read_gates
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.operations.failpoints import failpoint
from modelcd_assets.lib.operations.instance_config import PROMOTION_POOL
from modelcd_assets.lib.release import attestation, servable
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.names import declaration_of
from modelcd_assets.resources.alias_lock import AliasLockResource
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource


@dg.asset(
    partitions_def=candidates,
    deps=[evaluation, drift_report, benchmark_results],
    group_name="release",
    kinds={"mlflow"},
    pool=PROMOTION_POOL,
)
def production_model(
    context: dg.AssetExecutionContext,
    state: LocalStateResource,
    registry: MlflowRegistryResource,
    alias_lock: AliasLockResource,
    gate_graph: dg.ResourceParam[GateGraph],
) -> dg.MaterializeResult:
    """Refuses unless every gate passed on this candidate's current lineage, and production is still what the gates compared against."""
    ref = CandidateRef.parse(context.partition_key)
    decision = read_gates(context.instance, context.partition_key, gate_graph)
    if decision.problems:
        raise ModelcdError(f"refusing to promote {ref.uri}: " + "; ".join(decision.problems))
    record = state.record(ref)
    failpoint("before_promotion")
    reg = registry.registry()
    # The verdict becomes a signed statement about the bytes judged; the alias moves only once the one reader of
    # verdicts (lib/release/servable.py) accepts it over the bytes on disk, as the server and rollback will.
    verdict = attestation.Verdict(
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
        context.run_id,
    )
    envelope = attestation.sign(verdict, reg.keys.require_private(), subjects=declaration_of(record.task).subjects)
    reg.put_attestation(ref, envelope)
    attestation.write_local(state.root, ref.name, ref.version, envelope)
    servable.check(reg, state.root, ref, allow_rolled_back=True)
    reason = {
        "run_id": context.run_id,
        "gates": {r.gate: r.shown for r in decision.records},
        "judged_against": record.production_version,
        "policy_source": record.policy_source,
        "attestation": attestation.local_path(state.root, ref.name, ref.version).name,
    }
    previous = reg.move_production(ref, reason, expected=record.baseline_ref, lock=alias_lock.lock(context.instance, state.root))
    moved = "was already" if previous == ref else f"moved from {previous.version if previous else 'nothing'} to"
    context.log.info(f"production alias of {ref.name} {moved} {ref.version}")
    return dg.MaterializeResult(
        metadata={
            "production_version": ref.version,
            "previous_version": previous.version if previous else "none",
            "gates_verified": dg.MetadataValue.md("\n".join(f"- `{r.gate}`: {r.shown}" for r in decision.records)),
            "reason": dg.MetadataValue.json(json.loads(json.dumps(reason))),
        }
    )
