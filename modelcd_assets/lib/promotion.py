"""The second lock: promotion re-reads every gate's latest result for the candidate."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GateRecord:
    """The latest stored result of one gate for one candidate."""

    gate: str
    status: str | None  # "SUCCEEDED", "FAILED", "EXECUTION_FAILED", "PLANNED", ... or None when never run
    passed: bool | None
    current: bool  # evaluated against the latest materialization of the asset it guards


def gate_problems(records: list[GateRecord]) -> list[str]:
    """Why promotion must not happen; empty when every gate passed on current data."""
    problems = []
    for r in records:
        if r.status is None:
            problems.append(f"{r.gate}: no result recorded")
        elif r.status != "SUCCEEDED" or r.passed is not True:
            problems.append(f"{r.gate}: {r.status.lower()}" + ("" if r.passed is None else f" (passed={r.passed})"))
        elif not r.current:
            problems.append(f"{r.gate}: result is stale, the asset was re-materialized after the check ran")
    if not records:
        problems.append("no gates are defined for this asset; refusing to promote ungated")
    return problems
