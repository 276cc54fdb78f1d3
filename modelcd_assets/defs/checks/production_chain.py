"""Monitoring check on the production chain: non-blocking, it warns; nothing is promoted or rolled back on it."""

import dagster as dg

from modelcd_assets.defs.assets.production_chain import production_chain
from modelcd_assets.defs.checks.monitoring import monitoring_result, verdicts_of_this_run


@dg.asset_check(asset=production_chain, blocking=False)
def production_chain_is_intact(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    """Fails when a production chain has a move its records do not back (a hand-made move, a race, an edited tag)."""
    return monitoring_result(
        verdicts_of_this_run(context, production_chain),
        "no registered model has a production version: no chain to audit",
        "the production chain is broken",
    )
