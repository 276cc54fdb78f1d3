"""Gates on accuracy: paired INT8 accuracy vs production, and the policy's golden cases."""

import dagster as dg

from modelcd_assets.defs.assets.evaluation import evaluation
from modelcd_assets.defs.checks.verdict import check_result
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.inference.evaluate import load_evaluation
from modelcd_assets.lib.judging.gates import judge_accuracy, judge_golden
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.resources.state import LocalStateResource


@dg.asset_check(asset=evaluation, blocking=True, partitions_def=candidates)
def accuracy_within_tolerance(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
    """INT8 accuracy >= production's - tolerance, not significantly worse, and above the floor."""
    ref = CandidateRef.parse(context.partition_key)
    _, arrays = load_evaluation(state.files(ref))
    verdict = judge_accuracy(arrays["candidate_int8"], arrays.get("production_int8"), state.record(ref).effective_policy().accuracy)
    return check_result(verdict)


@dg.asset_check(asset=evaluation, blocking=True, partitions_def=candidates)
def golden_cases_pass(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
    """Every golden inference test declared in the policy predicts its expected label."""
    report, _ = load_evaluation(state.files(CandidateRef.parse(context.partition_key)))
    cases = report["golden"]
    return check_result(judge_golden([c["predicted"] for c in cases], [c["expected"] for c in cases], [c["text"] for c in cases]))
