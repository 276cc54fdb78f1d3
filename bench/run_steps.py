"""Seconds per step of a finished Dagster run, from its events: shared by the benches that break a gated run down."""

from __future__ import annotations

import dagster as dg


def step_seconds(instance: dg.DagsterInstance, run_id: str) -> dict[str, float]:
    """Each successful step's duration, as Dagster recorded it."""
    steps = {}
    for record in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_SUCCESS).records:
        event = record.event_log_entry.dagster_event
        steps[event.step_key] = event.event_specific_data.duration_ms / 1000
    return steps
