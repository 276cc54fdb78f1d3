"""production_recheck: production's throughput and p99 timed again, against the figures its throughput gate recorded."""

from datetime import datetime, timezone

import dagster as dg

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.inference.benchmark import SAMPLE_TEXTS, paired_throughput
from modelcd_assets.lib.inference.builds import read_json
from modelcd_assets.lib.inference.runtime import OnnxModel
from modelcd_assets.lib.inference.tokens import encode
from modelcd_assets.lib.judging.gates import Verdict, judge_production_recheck
from modelcd_assets.lib.judging.monitoring import judge_each, recorded
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.splits import read_split
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource

BATCHES = ("1", "32")  # the batch sizes the throughput gate recorded
METHOD = ("production's chosen INT8 model, two sessions of it timed in interleaved trials (as the throughput gate times a first candidate), "
          "on the gate's evaluation texts; the median of all trials is compared with the median the gate recorded. A recorded figure from another "
          "time is not an interleaved pair, so there is no paired CI: only a fall below throughput.min_ratio x recorded, or a p99 over the SLO, fails.")


def _measure(prod: CandidateRef, state: LocalStateResource, policy: PolicyResource, texts: list[str]) -> Verdict:
    tp = policy.for_model(prod.name).throughput
    record = state.record(prod)
    report_file = state.files(prod).benchmark
    if not report_file.is_file():
        raise FileNotFoundError(f"{report_file} is missing: {prod.uri} has no recorded throughput to compare with; run 'modelcd gate {prod.name} {prod.version}'")
    recorded = read_json(report_file).get("batches") or {}
    feeds = encode(record.build.merged, texts, state.cache_dir("tokens"))
    path = record.chosen_int8()
    a, b = OnnxModel(path), OnnxModel(path)
    trials, latency_b1 = {}, []
    for batch in BATCHES:
        run = paired_throughput(a, b, feeds, int(batch), tp.pairs)
        trials[batch] = run.candidate_throughput + run.production_throughput
        if batch == "1":
            latency_b1 = run.candidate_latency_ms + run.production_latency_ms
    return judge_production_recheck(trials, latency_b1, {k: recorded.get(k) for k in BATCHES}, tp)


def _cells(v: Verdict) -> str:
    n = v.numbers
    if "p99_ms" not in n:
        return " | ".join("n/a" for _ in (*BATCHES, "p99"))
    speed = [f"{n[f'b{b}_items_per_s']:.0f} / {n[f'b{b}_recorded_items_per_s']:.0f} ({n[f'b{b}_ratio']:.2f}x)" for b in BATCHES]
    return " | ".join([*speed, f"{n['p99_ms']:.1f}"])


@dg.asset(group_name="monitoring", kinds={"onnx"})
def production_recheck(context: dg.AssetExecutionContext, registry: MlflowRegistryResource, policy: PolicyResource,
                       state: LocalStateResource) -> dg.MaterializeResult:
    """Each production model's INT8 artifact timed as its gate timed it: a slower node or library shows as a fall from the recorded figures."""
    productions = registry.registry().productions()
    texts = [ex.text for ex in read_split(state.split("evaluation"))[:SAMPLE_TEXTS]] if productions else []
    verdicts = judge_each(productions, lambda model, prod: _measure(prod, state, policy, texts), gate="production_recheck", not_done="not measured",
                          unable="could not re-measure", errors=(ModelcdError, FileNotFoundError, ValueError), log=context.log.info)
    rows = "\n".join(f"| {m} | {productions[m].version} | {v.status} | {_cells(v)} |" for m, v in verdicts.items())
    table = ("| model | production | status | b1 items/s now / recorded | b32 items/s now / recorded | p99 b1 ms |\n|---|---|---|---|---|---|\n" + rows
             if verdicts else "no registered model has a production version: nothing to re-measure")
    return dg.MaterializeResult(
        metadata={
            "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "models": len(verdicts),
            "method": METHOD,
            "texts": len(texts),
            "results": dg.MetadataValue.md(table),
            "reasons": dg.MetadataValue.md("\n".join(f"- **{m}**: {v.reason}" for m, v in verdicts.items()) or "none"),
            # What production_still_meets_its_gate judges, exactly as decided here.
            "verdicts": dg.MetadataValue.json(recorded(productions, verdicts)),
        }
    )

