"""Gate on INT8 fidelity: the quantized model agrees with its FP32 export."""

import dagster as dg
import numpy as np

from modelcd_assets.defs.assets.quantized_model import quantized_model
from modelcd_assets.defs.checks.verdict import check_result
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.builds import read_json
from modelcd_assets.lib.candidate import CandidateRecord
from modelcd_assets.lib.gates import judge_fidelity
from modelcd_assets.lib.registry import CandidateRef
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets.resources.state import LocalStateResource


@dg.asset_check(asset=quantized_model, blocking=True, partitions_def=candidates)
def int8_agrees_with_fp32(context: dg.AssetCheckExecutionContext, state: LocalStateResource, policy: PolicyResource) -> dg.AssetCheckResult:
    """Top-1 agreement of the chosen INT8 variant with FP32 on the evaluation split."""
    ref = CandidateRef.parse(context.partition_key)
    build = CandidateRecord.load(state.candidate_dir(ref)).build
    chosen = read_json(build.chosen_file)["chosen"]
    with np.load(build.dir / "eval_predictions.npz") as preds:
        verdict = judge_fidelity(preds[chosen], preds["fp32"], policy.for_model(ref.name).int8_fidelity)
    return check_result(verdict)
