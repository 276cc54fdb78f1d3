"""Gate on the I/O contract: the declared Model SemVer bump covers the contract change against production."""

import dagster as dg

from modelcd_assets.defs.assets.onnx_model import onnx_model
from modelcd_assets.defs.checks.verdict import check_result
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.inference.builds import read_json
from modelcd_assets.lib.judging.gates import judge_semver
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.resources.state import LocalStateResource


@dg.asset_check(asset=onnx_model, blocking=True, partitions_def=candidates)
def semver_covers_contract_change(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
    """MAJOR for removed/retyped I/O, label-order or token-id changes; MINOR for optional inputs, appended labels, longer max length."""
    return check_result(judge_semver(read_json(state.files(CandidateRef.parse(context.partition_key)).contract)))
