"""Gate on INT8 fidelity: the INT8 artifact that would serve agrees with its FP32 reference, by the task's measure."""

import dagster as dg

from modelcd_assets.defs.assets.quantized_model import quantized_model
from modelcd_assets.defs.checks.verdict import check_result
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.task import task_of
from modelcd_assets.resources.state import LocalStateResource


@dg.asset_check(asset=quantized_model, blocking=True, partitions_def=candidates)
def int8_agrees_with_fp32(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
    """Top-1 agreement of the chosen INT8 variant with FP32 on the evaluation split (a causal LM: INT8 top-1 among FP32's top 5, KL,
    perplexity)."""
    record = state.record(CandidateRef.parse(context.partition_key))
    return check_result(task_of(record.task).fidelity_verdict(record, state))
