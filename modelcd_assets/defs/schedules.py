"""Schedules: the weekly fault sandbox, proving that the gates still fail closed, and the monitoring of production:
hourly live drift, nightly re-timing against the gate's figures."""

import dagster as dg

from modelcd_assets.defs.assets.gate_selftest import gate_selftest
from modelcd_assets.defs.assets.live_traffic import live_traffic
from modelcd_assets.defs.assets.production_chain import production_chain
from modelcd_assets.defs.assets.production_recheck import production_recheck
from modelcd_assets.lib.operations import traffic_log
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource

GATE_SELFTEST_JOB = "gate_selftest_job"

gate_selftest_job = dg.define_asset_job(
    GATE_SELFTEST_JOB,
    selection=dg.AssetSelection.assets(gate_selftest),
    description="Derive every fault class from production, gate each in an isolated copy, and report what ended as expected.",
)

# Sunday 03:00, when no one is promoting: the sandbox gates dozens of candidates on this machine.
gate_selftest_weekly = dg.ScheduleDefinition(
    name="gate_selftest_weekly", job=gate_selftest_job, cron_schedule="0 3 * * 0", default_status=dg.DefaultScheduleStatus.RUNNING
)
# The causal-LM demo's model, two hours later: its fault classes are the causal-LM catalog's (the task of its production).
gate_selftest_weekly_causal_lm = dg.ScheduleDefinition(
    name="gate_selftest_weekly_support_reply",
    job=gate_selftest_job,
    cron_schedule="0 5 * * 0",
    run_config={"ops": {"gate_selftest": {"config": {"model": "support-reply"}}}},
    default_status=dg.DefaultScheduleStatus.RUNNING,
)

LIVE_TRAFFIC_JOB = "judge_live_traffic"

judge_live_traffic = dg.define_asset_job(
    LIVE_TRAFFIC_JOB,
    selection=dg.AssetSelection.assets(live_traffic),
    description="Judge the newest window of production's sampled traffic for input drift against the data it was validated on.",
)

PRODUCTION_RECHECK_JOB = "recheck_production"

recheck_production = dg.define_asset_job(
    PRODUCTION_RECHECK_JOB,
    selection=dg.AssetSelection.assets(production_recheck, production_chain),
    description=(
        "Time production's INT8 model again and compare with the throughput and p99 its gate recorded; audit each production "
        "chain back to its first version (modelcd audit)."
    ),
)


@dg.schedule(job=judge_live_traffic, cron_schedule="0 * * * *", default_status=dg.DefaultScheduleStatus.RUNNING)
def live_traffic_hourly(context: dg.ScheduleEvaluationContext, registry: MlflowRegistryResource, state: LocalStateResource):
    """A run when some production model has sampled traffic; a registry that does not answer fails the tick, not a skip."""
    productions = registry.registry().productions()
    if not productions:
        return dg.SkipReason("no registered model has a production version: no live traffic to judge")
    sampled = sorted(m for m in productions if traffic_log.has_records(state.root, m))
    if not sampled:
        return dg.SkipReason(
            f"no sampled traffic for {', '.join(sorted(productions))} in the state folder {state.root}: "
            "serve production with 'modelcd serve' and serving.sample_ratio above 0"
        )
    return dg.RunRequest(tags={"modelcd/models": ",".join(sampled)})


# 02:00, when traffic is low, and an hour before Sunday's self-test would load the machine: timings compare like with like.
@dg.schedule(job=recheck_production, cron_schedule="0 2 * * *", default_status=dg.DefaultScheduleStatus.RUNNING)
def production_recheck_nightly(context: dg.ScheduleEvaluationContext, registry: MlflowRegistryResource):
    """A run when some model has a production version to re-time."""
    productions = registry.registry().productions()
    if not productions:
        return dg.SkipReason("no registered model has a production version: nothing to re-measure")
    return dg.RunRequest(tags={"modelcd/models": ",".join(sorted(productions))})
