"""Gate on cost: what a unit of work costs at the measured speed (per 1,000 requests, or per 1M generated tokens)."""

import dagster as dg

from modelcd_assets.defs.assets.benchmark_results import benchmark_results
from modelcd_assets.defs.checks.verdict import check_result
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.inference.builds import read_json
from modelcd_assets.lib.judging.gates import judge_cost
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.resources.state import LocalStateResource


@dg.asset_check(asset=benchmark_results, blocking=True, partitions_def=candidates)
def cost_within_budget(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
    """The policy's node price over the measured speed: under the ceiling, and not above production's by more than the tolerance."""
    ref = CandidateRef.parse(context.partition_key)
    report = read_json(state.files(ref).benchmark)
    return check_result(judge_cost(report["cost"], state.record(ref).effective_policy().cost))
