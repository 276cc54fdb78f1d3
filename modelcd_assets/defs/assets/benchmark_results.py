"""benchmark_results: what decides a candidate's speed and its cost per unit of work."""

import dagster as dg

from modelcd_assets.defs.assets.drift_report import drift_report
from modelcd_assets.defs.assets.quantized_model import quantized_model
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.defs.step_result import materialize
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.task import task_of
from modelcd_assets.resources.state import LocalStateResource


# After drift_report: a causal LM's cost per answer is priced on the tokens of the answers the drift gate generated.
@dg.asset(partitions_def=candidates, deps=[quantized_model, drift_report], group_name="evaluation", kinds={"onnx"})
def benchmark_results(context: dg.AssetExecutionContext, state: LocalStateResource) -> dg.MaterializeResult:
    """A classifier: A B A B ... trials at batch 1 and 32, a second round only when the first is inconclusive. A causal LM:
    the served graph's hash, the adapter's values, the base build's own timing (once per build), its answers' tokens."""
    record = state.record(CandidateRef.parse(context.partition_key))
    return materialize(task_of(record.task).benchmark(record, state))
