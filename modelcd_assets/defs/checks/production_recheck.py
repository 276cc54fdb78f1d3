"""Monitoring check on production's speed: non-blocking, it warns; nothing is promoted or rolled back on it."""

import dagster as dg

from modelcd_assets.defs.assets.production_recheck import production_recheck
from modelcd_assets.defs.checks.monitoring import monitoring_result, verdicts_of_this_run


@dg.asset_check(asset=production_recheck, blocking=False)
def production_still_meets_its_gate(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    """Fails when production's throughput fell below throughput.min_ratio x what its gate recorded, or its p99 exceeds the SLO."""
    return monitoring_result(
        verdicts_of_this_run(context, production_recheck),
        "no registered model has a production version: nothing to re-measure",
        "production no longer meets its throughput gate",
    )
