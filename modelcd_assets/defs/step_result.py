"""A task step's plain result (lib/tasks/task.StepResult) as a Dagster materialization."""

import dagster as dg

from modelcd_assets.lib.tasks.task import Json, Md, StepResult


def _value(v):
    if isinstance(v, Md):
        return dg.MetadataValue.md(v.text)
    if isinstance(v, Json):
        return dg.MetadataValue.json(v.value)
    return v


def materialize(result: StepResult) -> dg.MaterializeResult:
    return dg.MaterializeResult(
        metadata={k: _value(v) for k, v in result.metadata.items()},
        data_version=dg.DataVersion(result.data_version) if result.data_version is not None else None,
    )
