"""Turning a lib gate Verdict into a blocking check's result."""

import json

import dagster as dg

from modelcd_assets.lib.judging.gates import Verdict


def check_result(verdict: Verdict) -> dg.AssetCheckResult:
    """passed only on PASS; metadata carries the measured value, threshold, reason and raw numbers."""
    numbers = {k: v for k, v in verdict.numbers.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v}
    return dg.AssetCheckResult(
        passed=verdict.passed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=verdict.reason,
        metadata={
            "status": verdict.status,
            "measured": verdict.measured,
            "threshold": verdict.threshold,
            "reason": verdict.reason,
            "numbers": dg.MetadataValue.json(json.loads(json.dumps(verdict.numbers, default=float))),
            **{f"actual_{k}": float(v) for k, v in numbers.items()},
        },
    )
