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
    """Judged at batch 1 and batch 32 (a causal LM: at each concurrency, its p99 on time to first token); the worse verdict counts."""
    ref = CandidateRef.parse(context.partition_key)
    report = read_json(state.files(ref).benchmark)
    policy = state.record(ref).effective_policy()
    tp = policy.throughput
    first = next(iter(report["batches"]))  # batch 1, or a causal LM's first concurrency
    p99 = report["batches"][first]["candidate_p99_ms"]
    if report.get("latency_metric") == "ttft":  # a causal LM's latency SLO is on its time to first token
        tp = tp.model_copy(update={"p99_slo_ms": policy.generation.ttft_p99_slo_ms})
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
