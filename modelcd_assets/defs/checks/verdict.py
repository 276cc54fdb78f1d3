"""Turning a lib gate Verdict into a blocking check's result, and the checks that judge one task only."""

import json

import dagster as dg

from modelcd_assets.gate_results import TASKS_METADATA
from modelcd_assets.lib.judging.gates import Verdict
from modelcd_assets.lib.judging.promotion import NOT_APPLICABLE


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


def for_tasks(*tasks: str) -> dict:
    """A check's metadata saying it judges these tasks only: the gate graph requires it of their candidates and no other's."""
    return {TASKS_METADATA: ",".join(tasks)}


def not_applicable(gate: str, task: str) -> dg.AssetCheckResult:
    """The result of a one-task check on another task's candidate. It does not block the run, and promotion never counts it:
    the gate graph does not require this check of that task's candidates (gate_results.required_gates)."""
    reason = f"{gate} does not judge {task} models; their own gates do"
    return dg.AssetCheckResult(
        passed=True,
        severity=dg.AssetCheckSeverity.ERROR,
        description=reason,
        metadata={"status": NOT_APPLICABLE, "measured": "n/a", "threshold": "n/a", "reason": reason},
    )
