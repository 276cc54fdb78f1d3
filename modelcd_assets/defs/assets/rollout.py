"""rollout: a candidate whose offline gates all passed, taken to production through the policy's steps on live traffic.

One materialization per move. The gated run starts it (action start): it re-reads every gate as promotion does, signs a
verdict that says the offline gates passed and no more (the server may then give the version a shadow or canary share,
never production's place), and writes the rollout's first signed state to the registry. rollout_sensor then moves it
(advance, pause, abort, supersede), and so can a person (`modelcd rollout`); each move is written only over the state
it was decided on. Without a rollout section in the policy, for a first version and for a re-gated production
(CandidateRecord.no_rollout_because) the gated run records why, and production_model promotes as it always has.
"""

import json
import time

import dagster as dg
from pydantic import Field

from modelcd_assets.defs.assets.benchmark_results import benchmark_results
from modelcd_assets.defs.assets.drift_report import drift_report
from modelcd_assets.defs.assets.evaluation import evaluation
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.gate_results import GateGraph, gate_verdict, read_gates
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.operations.instance_config import PROMOTION_POOL
from modelcd_assets.lib.release import attestation, servable
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.release.rollout import (
    ACTIONS,
    FINISH,
    START,
    RolloutHistory,
    RolloutMoved,
    moved,
    read_state,
    started,
    write_state,
)
from modelcd_assets.lib.tasks.names import declaration_of
from modelcd_assets.resources.alias_lock import AliasLockResource
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource

NO_ROLLOUT = "none"  # the `status` of a gated run's rollout materialization when the policy has no rollout section


class RolloutConfig(dg.Config):
    action: str = Field(START, description="start (the gated run), advance, pause, resume, abort or supersede")
    expected_sequence: int = Field(-1, description="The sequence of the state this move was decided on (start: ignored)")
    analysis: str = Field("{}", description="The live analysis the move was decided on, as JSON ({} for a person's move)")
    by: str = Field("gate", description="Who decided the move: gate, rollout_sensor, or the user of `modelcd rollout`")
    reason: str = Field("", description="Why, in words")


def rollout_run_config(action: str, expected_sequence: int, analysis: dict, by: str, reason: str) -> dict:
    """Run config of a rollout move, as rollout_sensor and `modelcd rollout` launch it."""
    config = {"action": action, "expected_sequence": expected_sequence, "analysis": json.dumps(analysis), "by": by, "reason": reason}
    return {"ops": {"rollout": {"config": config}}}


@dg.asset(
    partitions_def=candidates,
    deps=[evaluation, drift_report, benchmark_results],
    group_name="release",
    kinds={"mlflow"},
    pool=PROMOTION_POOL,
)
def rollout(
    context: dg.AssetExecutionContext,
    config: RolloutConfig,
    state: LocalStateResource,
    registry: MlflowRegistryResource,
    alias_lock: AliasLockResource,
    gate_graph: dg.ResourceParam[GateGraph],
) -> dg.MaterializeResult:
    """Starts or moves this candidate's rollout; the state it leaves is its metadata."""
    if config.action not in ACTIONS or config.action == FINISH:
        raise ModelcdError(f"rollout action {config.action!r} is none of {', '.join(a for a in ACTIONS if a != FINISH)}")
    ref = CandidateRef.parse(context.partition_key)
    record = state.record(ref)
    policy = record.rollout()
    reg = registry.registry()
    if policy is None:
        if config.action != START:
            raise ModelcdError(f"{ref.uri} has no rollout to {config.action}: {record.no_rollout_because()}")
        return dg.MaterializeResult(metadata={"status": NO_ROLLOUT, "why": record.no_rollout_because()})
    lock = alias_lock.lock(context.instance, state.root)
    history = RolloutHistory(state.root, ref.name, ref.version)
    current = read_state(reg, ref.name)
    if config.action == START:
        decision = read_gates(context.instance, context.partition_key, gate_graph, of=dg.AssetKey("rollout"))
        if decision.problems:
            raise ModelcdError(f"refusing to roll out {ref.uri}: " + "; ".join(decision.problems))
        # The verdict the server's loader asks for before it gives the version any share: over the bytes judged, saying
        # that the offline gates passed and no more.
        verdict = gate_verdict(reg, ref, record, decision, context.run_id, {attestation.STAGE: attestation.OFFLINE_GATES})
        envelope = attestation.sign(verdict, reg.keys.require_private(), subjects=declaration_of(record.task).subjects)
        reg.put_attestation(ref, envelope)
        attestation.write_local(state.root, ref.name, ref.version, envelope)
        servable.check(reg, state.root, ref)
        new = started(ref, record.production_version, policy, attestation.policy_sha256(record.policy), current)
        history.restart()
        replaced = current.describe() if current is not None and current.serving_share else ""
        write_state(reg, new, None if current is None else current.sequence, reg.keys.require_private(), lock)
        if replaced and current.version != ref.version:
            RolloutHistory(state.root, ref.name, current.version).append(
                {
                    "step": current.step,
                    "kind": current.kind,
                    "share": current.share,
                    "action": "supersede",
                    "by": "gate",
                    "reason": f"version {ref.version} started a rollout of its own",
                    "at": time.time(),
                    "analysis": {},
                }
            )
    else:
        if current is None or current.version != ref.version:
            raise ModelcdError(
                f"{ref.uri} is not rolling out ({current.describe() if current else f'{ref.name} has no rollout'}): nothing to "
                f"{config.action}"
            )
        new = moved(current, config.action, policy, config.reason or config.by)
        if new is current:  # promote again: production_model, next in this run, moves the alias
            if current.sequence != config.expected_sequence:
                raise RolloutMoved(
                    f"the rollout of {ref.name} moved (state {current.sequence}, not {config.expected_sequence}); nothing changed"
                )
        else:
            write_state(reg, new, config.expected_sequence, reg.keys.require_private(), lock)
        history.append(
            {
                "step": current.step,
                "kind": current.kind,
                "share": current.share,
                "action": config.action,
                "by": config.by,
                "reason": config.reason,
                "at": time.time(),
                "seconds": round(time.time() - current.since, 1),
                "analysis": json.loads(config.analysis),
            }
        )
        replaced = ""
    context.log.info(f"rollout of {ref.uri}: {new.describe()}")
    steps = "\n".join(f"| {i + 1} | {s.label()} | {'**now**' if i == new.step else ''} |" for i, s in enumerate(policy.steps))
    return dg.MaterializeResult(
        metadata={
            "status": new.status,
            "step": new.step + 1,
            "steps": dg.MetadataValue.md("| step | what | |\n|---|---|---|\n" + steps),
            "state": new.describe(),
            "sequence": new.sequence,
            "action": config.action,
            "by": config.by,
            **({"replaced": replaced} if replaced else {}),
            **({"analysis": dg.MetadataValue.json(json.loads(config.analysis))} if config.action != START else {}),
        }
    )
