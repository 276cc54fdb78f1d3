"""benchmark_results: candidate vs production throughput and latency, interleaved in one run."""

import dagster as dg

from modelcd_assets.defs.assets.quantized_model import quantized_model
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.defs.step_result import materialize
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.task import task_of
from modelcd_assets.resources.state import LocalStateResource


@dg.asset(partitions_def=candidates, deps=[quantized_model], group_name="evaluation", kinds={"onnx"})
def benchmark_results(context: dg.AssetExecutionContext, state: LocalStateResource) -> dg.MaterializeResult:
    """A B A B ... trials at batch 1 and 32; a second round only when the first is inconclusive."""
    record = state.record(CandidateRef.parse(context.partition_key))
    return materialize(task_of(record.task).benchmark(record, state))
