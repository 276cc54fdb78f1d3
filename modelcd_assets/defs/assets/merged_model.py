"""merged_model: the deployable model of a candidate (its task says what that is) and its health report."""

import dagster as dg

from modelcd_assets.defs.assets.candidate import candidate
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.defs.step_result import materialize
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.task import task_of
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource


@dg.asset(partitions_def=candidates, deps=[candidate], group_name="build", kinds={"pytorch", "safetensors"})
def merged_model(context: dg.AssetExecutionContext, state: LocalStateResource, registry: MlflowRegistryResource) -> dg.MaterializeResult:
    """One deployable model folder (reused when the same base and adapter were merged before), and its health report."""
    record = state.record(CandidateRef.parse(context.partition_key))
    return materialize(task_of(record.task).prepare(record, state, registry.registry()))
