"""Monitoring check on live traffic: non-blocking, it warns; nothing is promoted or rolled back on it."""

import dagster as dg

from modelcd_assets.defs.assets.live_traffic import live_traffic
from modelcd_assets.defs.checks.monitoring import monitoring_result, verdicts_of_this_run


@dg.asset_check(asset=live_traffic, blocking=False)
def live_traffic_has_not_drifted(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    """Fails when any production model's live inputs drifted from the reference data; too little traffic to judge is not a pass."""
    return monitoring_result(
        verdicts_of_this_run(context, live_traffic),
        "no registered model has a production version: no live traffic to judge",
        "live traffic drifted from the reference data",
    )
