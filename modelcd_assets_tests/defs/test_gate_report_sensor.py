"""gate_report_sensor: the daemon's gated runs get their report page, passed or blocked; `modelcd gate` writes its own."""

import dagster as dg

from modelcd_assets.defs.jobs import GATE_JOB, GATE_REPORT_JOB
from modelcd_assets.defs.sensors.gate_report_sensor import report_request
from modelcd_assets.run_recovery import LAUNCHED_BY


def test_a_finished_gated_run_requests_its_candidates_report_once():
    run = dg.DagsterRun(job_name=GATE_JOB, run_id="r-1", tags={"dagster/partition": "ticket-intent:7"})
    request = report_request(run)
    assert isinstance(request, dg.RunRequest)
    assert request.partition_key == "ticket-intent:7" and request.run_key == "r-1"  # a restarted sensor does not request it twice


def test_runs_that_wrote_their_own_report_or_have_no_candidate_are_skipped():
    cli = dg.DagsterRun(job_name=GATE_JOB, run_id="r-2", tags={"dagster/partition": "ticket-intent:8", LAUNCHED_BY: "cli"})
    assert isinstance(report_request(cli), dg.SkipReason)
    assert isinstance(report_request(dg.DagsterRun(job_name=GATE_JOB, run_id="r-3")), dg.SkipReason)


def test_both_sensors_are_in_the_code_location_and_launch_the_report_job():
    from modelcd_assets.definitions import defs

    d = defs()
    for name in ("gate_report_after_promotion", "gate_report_after_block"):
        sensor = d.resolve_sensor_def(name)
        assert isinstance(sensor, dg.RunStatusSensorDefinition) and sensor.job_name == GATE_REPORT_JOB
