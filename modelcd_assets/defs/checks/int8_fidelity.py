"""Gate on INT8 fidelity: the quantized model agrees with its FP32 export."""

import dagster as dg
import numpy as np

from modelcd_assets.defs.assets.quantized_model import quantized_model
from modelcd_assets.defs.checks.verdict import check_result
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.judging.gates import judge_fidelity
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.resources.state import LocalStateResource


@dg.asset_check(asset=quantized_model, blocking=True, partitions_def=candidates)
def int8_agrees_with_fp32(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
    """Top-1 agreement of the chosen INT8 variant with FP32 on the evaluation split."""
    ref = CandidateRef.parse(context.partition_key)
    record = state.record(ref)
    build = record.build
    verdict = judge_fidelity(np.load(build.predictions(record.chosen_artifact_id())), np.load(build.predictions("fp32")), record.effective_policy().int8_fidelity)
    return check_result(verdict)
