"""calibration_revision: when a model's calibration set changes, production's weights are registered again under it, to be gated."""

import dagster as dg

from modelcd_assets.defs.assets.calibration_set import calibration_set
from modelcd_assets.lib.release.recalibration import REGISTERED, revise
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource


@dg.asset(deps=[calibration_set], group_name="data", kinds={"mlflow"}, automation_condition=dg.AutomationCondition.eager())
def calibration_revision(
    context: dg.AssetExecutionContext, state: LocalStateResource, registry: MlflowRegistryResource, policy: PolicyResource
) -> dg.MaterializeResult:
    """Materialized by declarative automation after every new calibration set: for each registered model whose current set is
    not the one production was calibrated with, a calibration revision (production's files, the new set pinned) that
    registry_sensor gates against production like any other version. It is promoted only if every gate passes."""
    reg = registry.registry()
    default = state.default_calibration()
    plans = [revise(reg, name, default, policy.for_model(name).quantization.variant) for name in reg.candidate_models()]
    for p in plans:
        context.log.info(f"{p.model}: {p.action}: {p.why}")
    rows = "".join(f"| {p.model} | {p.production or ''} | {p.action} | {p.revision or ''} | {p.why} |\n" for p in plans)
    registered = [f"{p.model}:{p.revision}" for p in plans if p.action == REGISTERED]
    return dg.MaterializeResult(
        metadata={
            "registered": ", ".join(registered) or "none",
            "plans": dg.MetadataValue.json(
                {p.model: {"action": p.action, "why": p.why, "revision": p.revision, "production": p.production} for p in plans}
            ),
            "models": (
                dg.MetadataValue.md("| model | production | action | revision | why |\n|---|---|---|---|---|\n" + rows)
                if rows
                else "no candidate models registered"
            ),
        }
    )
