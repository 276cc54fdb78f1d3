"""onnx_model: the FP32 ONNX reference of a candidate, its parity with torch, and its I/O contract."""

import dagster as dg

from modelcd_assets.defs.assets.merged_model import merged_model
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.defs.step_result import materialize
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.task import task_of
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource


@dg.asset(partitions_def=candidates, deps=[merged_model], group_name="build", kinds={"onnx"})
def onnx_model(context: dg.AssetExecutionContext, state: LocalStateResource, registry: MlflowRegistryResource) -> dg.MaterializeResult:
    """Exported once per build; parity is max |logit diff| torch vs ONNX on evaluation examples; the I/O contract is recorded."""
    record = state.record(CandidateRef.parse(context.partition_key))
    return materialize(task_of(record.task).export(record, state, registry.registry()))
