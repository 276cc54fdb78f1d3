"""quantized_model: the INT8 artifact that would serve a candidate, its fidelity to FP32, and its recorded probe."""

import dagster as dg

from modelcd_assets.defs.assets.calibration_set import calibration_set
from modelcd_assets.defs.assets.onnx_model import onnx_model
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.defs.step_result import materialize
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.task import task_of
from modelcd_assets.resources.state import LocalStateResource


@dg.asset(partitions_def=candidates, deps=[onnx_model, calibration_set], group_name="build", kinds={"onnx"})
def quantized_model(context: dg.AssetExecutionContext, state: LocalStateResource) -> dg.MaterializeResult:
    """INT8 of the fused graph in the variant chosen once per base and calibration set (or pinned by the policy), static
    INT8 calibrated with the set pinned on this version; fidelity and speed measured."""
    record = state.record(CandidateRef.parse(context.partition_key))
    return materialize(task_of(record.task).quantize(record, state))
