"""production_model: moves the MLflow alias `production` to the candidate, after re-reading every gate (and, under a rollout
policy, once the rollout reached its promote step)."""

import json

import dagster as dg

from modelcd_assets.defs.assets.rollout import rollout
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.gate_results import GateGraph, gate_verdict, read_gates
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.rollout_policy import PROMOTE
from modelcd_assets.lib.operations.failpoints import failpoint
from modelcd_assets.lib.operations.instance_config import PROMOTION_POOL
from modelcd_assets.lib.release import attestation, servable
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.release.rollout import FINISH, RolloutHistory, moved, read_state, write_state
from modelcd_assets.lib.release.rollout_state import RUNNING
from modelcd_assets.lib.tasks.names import declaration_of
from modelcd_assets.resources.alias_lock import AliasLockResource
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource


@dg.asset(
    partitions_def=candidates,
    deps=[rollout],
    group_name="release",
    kinds={"mlflow"},
    pool=PROMOTION_POOL,
    output_required=False,
)
def production_model(
    context: dg.AssetExecutionContext,
    state: LocalStateResource,
    registry: MlflowRegistryResource,
    alias_lock: AliasLockResource,
    gate_graph: dg.ResourceParam[GateGraph],
):
    """Refuses unless every gate passed on this candidate's current lineage, and production is still what the gates compared against.

    Under a rollout policy it moves the alias only at the rollout's promote step, and signs the live analysis of every step
    into the verdict; before that step it is not materialized, and says where the rollout is."""
    ref = CandidateRef.parse(context.partition_key)
    decision = read_gates(context.instance, context.partition_key, gate_graph)
    if decision.problems:
        raise ModelcdError(f"refusing to promote {ref.uri}: " + "; ".join(decision.problems))
    record = state.record(ref)
    reg = registry.registry()
    policy = record.rollout()
    extra, rolling = {}, None
    if policy is not None:
        rolling = read_state(reg, ref.name)
        if rolling is None or rolling.version != ref.version or rolling.status != RUNNING or rolling.kind != PROMOTE:
            where = rolling.describe() if rolling is not None else f"{ref.name} has no rollout state"
            context.log.info(f"{ref.uri} is rolled out before it is production: {where}; the alias moves at its promote step")
            return
        extra = {"rollout": RolloutHistory(state.root, ref.name, ref.version).read()}
    failpoint("before_promotion")
    # The verdict becomes a signed statement about the bytes judged; the alias moves only once the one reader of
    # verdicts (lib/release/servable.py) accepts it over the bytes on disk, as the server and rollback will.
    verdict = gate_verdict(reg, ref, record, decision, context.run_id, extra)
    envelope = attestation.sign(verdict, reg.keys.require_private(), subjects=declaration_of(record.task).subjects)
    reg.put_attestation(ref, envelope)
    attestation.write_local(state.root, ref.name, ref.version, envelope)
    servable.check(reg, state.root, ref, allow_rolled_back=True, production=True)
    reason = {
        "run_id": context.run_id,
        "gates": {r.gate: r.shown for r in decision.records},
        "judged_against": record.production_version,
        "policy_source": record.policy_source,
        "attestation": attestation.local_path(state.root, ref.name, ref.version).name,
        **({"rollout": [f"{s['kind']} {s['share']:g}: {s['action']}" for s in extra["rollout"]]} if rolling is not None else {}),
    }
    lock = alias_lock.lock(context.instance, state.root)
    previous = reg.move_production(ref, reason, expected=record.baseline_ref, lock=lock)
    if rolling is not None:
        write_state(reg, moved(rolling, FINISH, policy, "promoted"), rolling.sequence, reg.keys.require_private(), lock)
    moved_text = "was already" if previous == ref else f"moved from {previous.version if previous else 'nothing'} to"
    context.log.info(f"production alias of {ref.name} {moved_text} {ref.version}")
    yield dg.MaterializeResult(
        metadata={
            "production_version": ref.version,
            "previous_version": previous.version if previous else "none",
            "gates_verified": dg.MetadataValue.md("\n".join(f"- `{r.gate}`: {r.shown}" for r in decision.records)),
            "reason": dg.MetadataValue.json(json.loads(json.dumps(reason))),
        }
    )
