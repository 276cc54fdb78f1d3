"""production_rollback: moves the production alias back, by the SLO sensor's decision or by hand."""

import json

import dagster as dg
from pydantic import Field

from modelcd_assets.lib.operations.instance_config import PROMOTION_POOL
from modelcd_assets.lib.release import servable
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.release.rollback import roll_back, rollback_target
from modelcd_assets.resources.alias_lock import AliasLockResource
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource


class RollbackConfig(dg.Config):
    model: str = Field(description="Registered model whose production alias moves back")
    from_version: str = Field(description="The production version being rolled back; nothing moves if production is no longer this version")
    trigger: str = Field("manual", description="What decided the rollback: trigger_sensor and its trigger, or manual")
    reason: str = Field("{}", description="Why, as JSON: the PromQL values and thresholds, or the operator's words")


def rollback_run_config(model: str, from_version: str, trigger: str, reason: dict) -> dict:
    """Run config of the rollback job, as trigger_sensor and `modelcd rollback` both launch it."""
    config = {"model": model, "from_version": from_version, "trigger": trigger, "reason": json.dumps(reason, sort_keys=True)}
    return {"ops": {production_rollback.op.name: {"config": config}}}


@dg.asset(group_name="operations", kinds={"mlflow", "prometheus"}, pool=PROMOTION_POOL)
def production_rollback(
    context: dg.AssetExecutionContext,
    config: RollbackConfig,
    registry: MlflowRegistryResource,
    state: LocalStateResource,
    alias_lock: AliasLockResource,
) -> dg.MaterializeResult:
    """One materialization per rollback: from which version, to which, and why."""
    reg = registry.registry()
    bad = CandidateRef(config.model, config.from_version)
    current = reg.production(config.model)
    if current != bad:
        now = current.version if current else "nothing"
        context.log.warning(f"production of {config.model} is {now}, not {bad.version}; nothing to roll back")
        return dg.MaterializeResult(
            metadata={"outcome": "not needed", "model": config.model, "from_version": bad.version, "production_version": now}
        )
    # A target must hold a valid attestation over its bytes, as the server will check before it follows the alias there.
    target, passed_over = rollback_target(
        reg, bad, lambda ref: [why] if (why := servable.reason(reg, state.root, ref, production=True)) else []
    )
    reason = {"trigger": config.trigger, "run_id": context.run_id, "why": json.loads(config.reason)}
    roll_back(reg, bad, target, reason, alias_lock.lock(context.instance, state.root))
    context.log.info(f"production of {config.model} rolled back from {bad.version} to {target.version}")
    return dg.MaterializeResult(
        metadata={
            "outcome": "rolled back",
            "model": config.model,
            "from_version": bad.version,
            "to_version": target.version,
            "trigger": config.trigger,
            "why": dg.MetadataValue.json(reason["why"]),
            "passed_over": dg.MetadataValue.json(passed_over),
        }
    )
