"""drift_report: Evidently drift of candidate vs production outputs on traffic, and of traffic vs reference."""

import dagster as dg
from pydantic import Field

from modelcd_assets.defs.assets.quantized_model import quantized_model
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.defs.step_result import materialize
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.task import task_of
from modelcd_assets.resources.state import LocalStateResource


class DriftConfig(dg.Config):
    traffic_sample: str = Field("traffic_current", description="Name of the traffic split in the data folder to judge drift on")
    reference_sample: str = Field("evaluation", description="Name of the split the model was validated on")


@dg.asset(partitions_def=candidates, deps=[quantized_model], group_name="evaluation", kinds={"evidently"})
def drift_report(context: dg.AssetExecutionContext, config: DriftConfig, state: LocalStateResource) -> dg.MaterializeResult:
    """Both drifts measured on the same traffic sample, with the INT8 models that would serve it."""
    record = state.record(CandidateRef.parse(context.partition_key))
    return materialize(task_of(record.task).drift(record, state, config.traffic_sample, config.reference_sample))
