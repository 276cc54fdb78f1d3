"""Gate on speed, by what decides it: a classifier's graph against production's, interleaved; a causal-LM adapter's base build."""

import dagster as dg

from modelcd_assets.defs.assets.benchmark_results import benchmark_results
from modelcd_assets.defs.checks.verdict import check_result
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.task import task_of
from modelcd_assets.resources.state import LocalStateResource


@dg.asset_check(asset=benchmark_results, blocking=True, partitions_def=candidates)
def throughput_within_tolerance(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
    """A classifier: the paired ratio at batch 1 and 32 and the p99 SLO. A causal LM: the served graph is the base build's by
    hash, the adapter's values hold nothing that slows a CPU on it, and the build's own timing meets the TTFT SLO."""
    record = state.record(CandidateRef.parse(context.partition_key))
    return check_result(task_of(record.task).throughput_verdict(record, state))
