"""Gate on drift: candidate vs production predictions, and traffic vs reference inputs."""

import dagster as dg

from modelcd_assets.defs.assets.drift_report import drift_report
from modelcd_assets.defs.checks.verdict import check_result
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.inference.builds import read_json
from modelcd_assets.lib.judging.gates import judge_drift
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.resources.state import LocalStateResource


@dg.asset_check(asset=drift_report, blocking=True, partitions_def=candidates)
def no_drift_detected(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
    """Prediction drift under its threshold and traffic inputs still like the reference data."""
    ref = CandidateRef.parse(context.partition_key)
    report = read_json(state.files(ref).drift)
    return check_result(judge_drift(report["prediction_drift"], report["input_drift"], state.record(ref).effective_policy().drift))
