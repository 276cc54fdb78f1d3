"""The second lock: promotion re-reads every gate's latest result, and the lineage it was judged on, for the candidate."""

from __future__ import annotations

from dataclasses import dataclass

NO_CASES = "no cases declared"  # a gate with nothing to judge (golden cases): passes, and says so instead of "pass"
# A one-task gate run on another task's candidate: it passes so the run goes on, and is never what promotion counts.
NOT_APPLICABLE = "not applicable"


@dataclass(frozen=True)
class GateRecord:
    """The latest stored result of one gate for one candidate."""

    gate: str
    status: str | None  # "SUCCEEDED", "FAILED", "EXECUTION_FAILED", "PLANNED", ... or None when never run
    passed: bool | None
    current: bool  # evaluated against the latest materialization of the asset it guards
    verdict: str = ""  # the gate's own word: pass, fail, inconclusive, or NO_CASES
    measured: str = ""
    threshold: str = ""
    reason: str = ""

    @property
    def shown(self) -> str:
        """What status tables print for this gate: exactly what promotion makes of it."""
        if self.status is None or self.status == "PLANNED":
            return "not run"
        if self.status == "FAILED":  # evaluated, and did not pass: the gate's own word (fail, inconclusive)
            return self.verdict or "fail"
        if self.status != "SUCCEEDED":
            return self.status.lower()
        if self.passed is True and not self.current:
            return "stale"
        if self.verdict == NO_CASES:
            return "no golden cases declared" if self.gate == "golden_cases_pass" else NO_CASES
        return self.verdict or ("pass" if self.passed else "fail")


def lineage_problems(latest: dict[str, int | None], parents: dict[str, list[str]]) -> list[str]:
    """Assets built from an older version of a parent than the parent's latest: every result below them is stale.

    latest maps each asset to its latest materialization's storage id (ids only grow), None when never materialized.
    """
    problems = []
    for asset, ups in parents.items():
        if latest.get(asset) is None:
            problems.append(f"{asset} was never materialized for this candidate")
            continue
        for up in ups:
            if latest.get(up) is not None and latest[up] > latest[asset]:
                problems.append(
                    f"{up} was re-materialized after {asset} was built from it; results downstream of {up} are stale: re-run the gated job"
                )
    return problems


def _failed(r: GateRecord) -> str:
    """A gate that judged and did not pass, in its own word, with its measured value against its threshold (or its reason)."""
    said = f"{r.gate}: {r.verdict or 'fail'}"
    if r.measured or r.threshold:
        return f"{said}, measured {r.measured or 'nothing'} against {r.threshold or 'no threshold recorded'}"
    return f"{said}: {r.reason}" if r.reason else said


def gate_problems(records: list[GateRecord], lineage: list[str] = ()) -> list[str]:
    """Why promotion must not happen; empty when every gate passed on this candidate's current lineage."""
    problems = []
    for r in records:
        if r.status is None:
            problems.append(f"{r.gate}: no result recorded")
        elif r.status == "FAILED":  # evaluated, and did not pass: what it measured against what it allows leads
            problems.append(_failed(r))
        elif r.status != "SUCCEEDED" or r.passed is not True:
            problems.append(f"{r.gate}: {r.status.lower()}" + ("" if r.passed is None else f" (passed={r.passed})"))
        elif r.verdict == NOT_APPLICABLE:  # the gate says it judges another task than the one that requires it
            problems.append(
                f"{r.gate}: it did not judge this candidate (it judges another task's models), but the candidate's task requires it"
            )
        elif not r.current:
            problems.append(f"{r.gate}: result is stale, the asset was re-materialized after the check ran")
    problems += list(lineage)
    if not records:
        problems.append("no gates are defined for this asset; refusing to promote ungated")
    return problems
