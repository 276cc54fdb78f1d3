"""gate_report_sensor: after every gated run the daemon ran, passed or blocked, and every rollout move, that candidate's
gate_report is written."""

import dagster as dg

from modelcd_assets.defs.jobs import advance_rollout, gate_candidate, write_gate_report
from modelcd_assets.run_recovery import LAUNCHED_BY

PARTITION_TAG = "dagster/partition"


def report_request(run: dg.DagsterRun) -> dg.RunRequest | dg.SkipReason:
    """One gate_report run per finished gated run (run_key: that run's id, so a sensor restart never writes it twice)."""
    partition = run.tags.get(PARTITION_TAG)
    if run.tags.get(LAUNCHED_BY) == "cli":
        return dg.SkipReason(f"run {run.run_id} ran in a modelcd process, which wrote {partition}'s report itself")
    if not partition:
        return dg.SkipReason(f"run {run.run_id} has no candidate partition; nothing to report")
    return dg.RunRequest(
        run_key=run.run_id, partition_key=partition, tags={"modelcd/candidate": partition, "modelcd/gated_run": run.run_id}
    )


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.SUCCESS,
    monitored_jobs=[gate_candidate, advance_rollout],
    request_job=write_gate_report,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def gate_report_after_promotion(context: dg.RunStatusSensorContext):
    """A gated run that succeeded: its candidate was promoted, production already pointed at it, or its rollout started; or a
    rollout move: the page shows the step's live analysis under the offline gates."""
    return report_request(context.dagster_run)


@dg.run_failure_sensor(monitored_jobs=[gate_candidate], request_job=write_gate_report, default_status=dg.DefaultSensorStatus.RUNNING)
def gate_report_after_block(context: dg.RunFailureSensorContext):
    """A gated run that failed: a gate blocked it, or a step could not run; the page says which."""
    return report_request(context.dagster_run)
