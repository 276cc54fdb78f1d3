"""What the monitoring checks share: the verdicts their asset recorded in this run, judged as one WARN-severity result."""

import dagster as dg

from modelcd_assets.lib.judging.gates import FAIL, PASS


def verdicts_of_this_run(context: dg.AssetCheckExecutionContext, asset: dg.AssetsDefinition) -> dict[str, dict] | str:
    """The per-model verdicts the asset recorded in this run's materialization; a string says why there are none.

    A monitoring asset judges all production models in one run; its check judges exactly what that run decided,
    never an older materialization's verdicts.
    """
    event = context.instance.get_latest_materialization_event(asset.key)
    if event is None or event.run_id != context.run.run_id:
        return f"{asset.key.to_user_string()} was not materialized in this run; materialize it (its check runs with it)"
    recorded = event.asset_materialization.metadata.get("verdicts")
    if recorded is None or not isinstance(recorded.value, dict):
        return f"{asset.key.to_user_string()}'s materialization in this run records no verdicts; re-materialize it"
    return recorded.value


def monitoring_result(verdicts: dict[str, dict] | str, nothing: str, problem: str) -> dg.AssetCheckResult:
    """WARN severity; passed only when every model's verdict is a pass, so inconclusive or unchecked never reads as fine."""
    if isinstance(verdicts, str):
        return dg.AssetCheckResult(
            passed=False, severity=dg.AssetCheckSeverity.WARN, description=f"not checked: {verdicts}", metadata={"reason": verdicts}
        )
    failed = sorted(m for m, v in verdicts.items() if v["status"] == FAIL)
    unjudged = sorted(m for m, v in verdicts.items() if v["status"] not in (PASS, FAIL))
    if not verdicts:
        description = nothing
    else:
        description = "; ".join(
            f"{m} v{v['version']}: {v['status']}: {v['reason']}"
            for m, v in sorted(verdicts.items(), key=lambda kv: (kv[1]["status"] == PASS, kv[0]))
        )
        if failed:
            description = f"{problem} in {', '.join(failed)}. {description}"
    return dg.AssetCheckResult(
        passed=not failed and not unjudged,
        severity=dg.AssetCheckSeverity.WARN,
        description=description,
        metadata={
            "failed": ", ".join(failed) or "none",
            "not_judged": ", ".join(unjudged) or "none",
            "statuses": dg.MetadataValue.json({m: v["status"] for m, v in verdicts.items()}),
            "reasons": dg.MetadataValue.json({m: v["reason"] for m, v in verdicts.items()}),
        },
    )
