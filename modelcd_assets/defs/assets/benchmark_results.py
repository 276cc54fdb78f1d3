"""benchmark_results: candidate vs production throughput and latency, interleaved in one run."""

import dagster as dg
import numpy as np

from modelcd_assets.defs.assets.quantized_model import quantized_model
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.inference.benchmark import SAMPLE_TEXTS, merge_runs, paired_throughput, summarize
from modelcd_assets.lib.inference.builds import write_json
from modelcd_assets.lib.inference.runtime import OnnxModel
from modelcd_assets.lib.inference.tokens import encode
from modelcd_assets.lib.presentation.plots import latency_plot_md
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.splits import read_split
from modelcd_assets.resources.state import LocalStateResource


@dg.asset(partitions_def=candidates, deps=[quantized_model], group_name="evaluation", kinds={"onnx"})
def benchmark_results(context: dg.AssetExecutionContext, state: LocalStateResource) -> dg.MaterializeResult:
    """A B A B ... trials at batch 1 and 32; a second round only when the first is inconclusive."""
    ref = CandidateRef.parse(context.partition_key)
    record = state.record(ref)
    prod_record = record.baseline(state.root)
    tp = record.effective_policy().throughput
    texts = [ex.text for ex in read_split(state.split("evaluation"))[:SAMPLE_TEXTS]]
    feeds = encode(record.build.merged, texts, state.cache_dir("tokens"))
    lengths = feeds["attention_mask"].sum(axis=1)
    # With nothing in production the candidate is paired with itself: the ratio then shows the noise floor.
    cand, prod = OnnxModel(record.chosen_int8()), OnnxModel((prod_record or record).chosen_int8())
    results, plots = {}, {}
    for batch in (1, 32):
        run = paired_throughput(cand, prod, feeds, batch, tp.pairs)
        summary = summarize(run, tp.confidence)
        while summary["ratio_ci_low"] < tp.min_ratio <= summary["ratio_ci_high"] and len(run.ratios) < tp.max_pairs:
            run = merge_runs(run, paired_throughput(cand, prod, feeds, batch, min(tp.pairs, tp.max_pairs - len(run.ratios)), warmup=0))
            summary = summarize(run, tp.confidence)
        results[str(batch)] = summary
        if batch == 1:
            plots = {f"candidate {ref.key}": run.candidate_latency_ms, f"production {prod_record.ref.key if prod_record else '(self)'}": run.production_latency_ms}
    shape = {"texts": len(texts), "median_tokens": float(np.median(lengths)), "max_tokens": int(lengths.max())}
    report = {"inputs": shape, "production": prod_record.ref.key if prod_record else None, "batches": results}
    write_json(state.files(ref).benchmark, report)
    rows = "\n".join(
        f"| {b} | {r['pairs']} | {r['candidate_items_per_s']:.0f} | {r['production_items_per_s']:.0f} | {r['ratio_median']:.3f} [{r['ratio_ci_low']:.3f}, {r['ratio_ci_high']:.3f}] "
        f"| {r['candidate_p50_ms']:.2f} / {r['candidate_p99_ms']:.2f} | {r['production_p50_ms']:.2f} / {r['production_p99_ms']:.2f} |"
        for b, r in results.items())
    table = ("| batch | pairs | candidate items/s | production items/s | ratio median [CI] | candidate p50/p99 ms | production p50/p99 ms |\n"
             "|---|---|---|---|---|---|---|\n" + rows)
    return dg.MaterializeResult(
        metadata={
            "throughput_ratio_b32": results["32"]["ratio_median"],
            "throughput_ratio_b1": results["1"]["ratio_median"],
            "p99_ms_b1": results["1"]["candidate_p99_ms"],
            "p50_ms_b1": results["1"]["candidate_p50_ms"],
            "inputs": dg.MetadataValue.json(shape),
            "production_version": prod_record.ref.key if prod_record else "none (self-paired)",
            "results": dg.MetadataValue.md(table),
            "latency_b1": dg.MetadataValue.md(latency_plot_md(plots, f"batch 1, {len(texts)} evaluation texts, median {shape['median_tokens']:.0f} tokens")),
        }
    )
