"""Gate on drift: candidate vs production predictions, and traffic vs reference inputs."""

import dagster as dg

from modelcd_assets.defs.assets.drift_report import REPORT_FILE, drift_report
from modelcd_assets.defs.checks.verdict import check_result
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.builds import read_json
from modelcd_assets.lib.gates import judge_drift
from modelcd_assets.lib.registry import CandidateRef
from modelcd_assets.resources.state import LocalStateResource


@dg.asset_check(asset=drift_report, blocking=True, partitions_def=candidates)
def no_drift_detected(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
    """Prediction drift under its threshold and traffic inputs still like the reference data."""
    ref = CandidateRef.parse(context.partition_key)
    report = read_json(state.candidate_dir(ref) / REPORT_FILE)
    return check_result(judge_drift(report["prediction_drift"], report["input_drift"], state.record(ref).effective_policy().drift))
