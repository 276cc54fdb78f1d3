"""evaluation: paired per-example scores of the candidate and of production on the evaluation split, and the golden cases."""

import dagster as dg

from modelcd_assets.defs.assets.quantized_model import quantized_model
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.defs.step_result import materialize
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.task import task_of
from modelcd_assets.resources.state import LocalStateResource


@dg.asset(partitions_def=candidates, deps=[quantized_model], group_name="evaluation", kinds={"onnx"})
def evaluation(context: dg.AssetExecutionContext, state: LocalStateResource) -> dg.MaterializeResult:
    """Paired per-example correctness, so the accuracy gate can test candidate vs production on the same examples."""
    record = state.record(CandidateRef.parse(context.partition_key))
    return materialize(task_of(record.task).evaluate(record, state))
