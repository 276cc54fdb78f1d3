"""Gates on quality against production on the evaluation split, by the task's measure, and the policy's golden cases."""

import dagster as dg

from modelcd_assets.defs.assets.evaluation import evaluation
from modelcd_assets.defs.checks.verdict import check_result, for_tasks, not_applicable
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.names import CAUSAL_LM, CLASSIFICATION
from modelcd_assets.lib.tasks.task import task_of
from modelcd_assets.resources.state import LocalStateResource


def _quality_check(name: str, task: str, description: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=evaluation, name=name, blocking=True, partitions_def=candidates, description=description, metadata=for_tasks(task)
    )
    def _check(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
        record = state.record(CandidateRef.parse(context.partition_key))
        if record.task != task:
            return not_applicable(name, record.task)
        return check_result(task_of(task).quality_verdict(record, state))

    return _check


accuracy_within_tolerance = _quality_check(
    "accuracy_within_tolerance", CLASSIFICATION, "INT8 accuracy >= production's - tolerance, not significantly worse, and above the floor."
)
perplexity_within_tolerance = _quality_check(
    "perplexity_within_tolerance",
    CAUSAL_LM,
    "Perplexity on the evaluation replies within tolerance of production's, paired per reply, and under the ceiling.",
)


@dg.asset_check(asset=evaluation, blocking=True, partitions_def=candidates)
def golden_cases_pass(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
    """Every golden case declared in the policy gives its expected answer (a label; a causal LM's greedy completion)."""
    record = state.record(CandidateRef.parse(context.partition_key))
    return check_result(task_of(record.task).golden_verdict(record, state))
