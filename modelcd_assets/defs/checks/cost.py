"""Gate on cost: what a unit of work costs at the measured speed (a classifier: per 1,000 requests; a causal LM: per answer)."""

import dagster as dg

from modelcd_assets.defs.assets.benchmark_results import benchmark_results
from modelcd_assets.defs.checks.verdict import check_result
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.task import task_of
from modelcd_assets.resources.state import LocalStateResource


@dg.asset_check(asset=benchmark_results, blocking=True, partitions_def=candidates)
def cost_within_budget(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
    """The policy's node price over the measured speed (a causal LM's: x its tokens per answer): under the ceilings, and not
    above production's by more than the tolerance."""
    record = state.record(CandidateRef.parse(context.partition_key))
    return check_result(task_of(record.task).cost_verdict(record, state))
