"""Schedules: the weekly fault sandbox, proving that the gates still fail closed."""

import dagster as dg

from modelcd_assets.defs.assets.gate_selftest import gate_selftest

GATE_SELFTEST_JOB = "gate_selftest_job"

gate_selftest_job = dg.define_asset_job(
    GATE_SELFTEST_JOB,
    selection=dg.AssetSelection.assets(gate_selftest),
    description="Derive every fault class from production, gate each in an isolated copy, and report what ended as expected.",
)

# Sunday 03:00, when no one is promoting: the sandbox gates dozens of candidates on this machine.
gate_selftest_weekly = dg.ScheduleDefinition(name="gate_selftest_weekly", job=gate_selftest_job, cron_schedule="0 3 * * 0",
                                             default_status=dg.DefaultScheduleStatus.RUNNING)
