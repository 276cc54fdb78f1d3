"""Gate on speed: paired throughput ratio vs production and the p99 latency SLO."""

import dagster as dg

from modelcd_assets.defs.assets.benchmark_results import benchmark_results
from modelcd_assets.defs.checks.verdict import check_result
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.inference.builds import read_json
from modelcd_assets.lib.judging.gates import FAIL, INCONCLUSIVE, PASS, Verdict, judge_throughput
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.resources.state import LocalStateResource

_SEVERITY = {PASS: 0, INCONCLUSIVE: 1, FAIL: 2}


@dg.asset_check(asset=benchmark_results, blocking=True, partitions_def=candidates)
def throughput_within_tolerance(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
    """Judged at batch 1 and batch 32; the worse verdict of the two counts."""
    ref = CandidateRef.parse(context.partition_key)
    report = read_json(state.files(ref).benchmark)
    tp = state.record(ref).effective_policy().throughput
    p99 = report["batches"]["1"]["candidate_p99_ms"]
    verdicts = {
        batch: judge_throughput(r["ratio_median"], r["ratio_ci_low"], r["ratio_ci_high"], p99, report["production"] is not None, tp)
        for batch, r in report["batches"].items()
    }
    worst = max(verdicts.values(), key=lambda v: _SEVERITY[v.status])
    combined = Verdict(
        "throughput", worst.status,
        "; ".join(f"b{b}: {v.measured}" for b, v in verdicts.items()), worst.threshold,
        "; ".join(f"batch {b}: {v.reason}" for b, v in verdicts.items()),
        {f"b{b}_{k}": x for b, v in verdicts.items() for k, x in v.numbers.items()},
    )
    return check_result(combined)
