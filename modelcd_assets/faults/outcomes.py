"""How a fault class ends: what it declares it must end in, and what the sandbox saw."""

from __future__ import annotations

from dataclasses import dataclass, field

REFUSED = "refused at register"  # Registry.register raised BadCandidate: its safety scan
MANIFEST = "manifest mismatch"  # files changed after registration; Registry.fetch refused them
BLOCKED = "blocked by gate"
BAD_INPUT = "bad input"  # the run's outcome was BAD_INPUT: the candidate does not fit (no gate judged it)
SUPERSEDED = "superseded"
RUN_FAILED = "run failed, nothing promoted"
SKIPPED = "sensor skipped, nothing launched"
NEVER_SERVED = "never served"  # servable.check and the server's loader refused a version without a valid verdict over its bytes
ROLLOUT_ABORTED = "aborted on live traffic"  # stopped at a shadow or canary step: its share back to 0, production untouched
ROLLOUT_PAUSED = "paused on live traffic"  # no verdict at a step's end (too few samples): never promoted without a person
# Only ever expected: aborted, or paused (a failure of metrics that are not critical scores marginal on one model, below
# it on another), at a shadow or canary step; either way never promoted without a person.
ROLLOUT_STOPPED = "stopped on live traffic"
REJECTED = "rejected before inference"  # answered 413/422, counted in modelcd_requests_rejected_total, never in the latency histogram
# Counted apart, neither caught nor missed: the fault could not be produced on the model under test (the detail says what was measured).
NOT_REPRODUCIBLE = "not reproducible on this model"
# Only ever actual outcomes: a fault that got through, or a sandbox that could not judge it.
PROMOTED = "promoted"
LAUNCHED = "sensor launched a run"
CODE_RAN = "code in the candidate ran"
GOT_THROUGH = "got through to serving"  # a version without a valid verdict was accepted, or an oversized request reached a model
ERROR = "sandbox error"


@dataclass(frozen=True)
class Outcome:
    kind: str
    gate: str | None = None  # expected: the gate that must block; actual: the first gate that failed
    gates: tuple[str, ...] = ()  # actual, blocked: every gate that failed
    detail: str = field(default="", compare=False)  # expected: text the actual outcome's detail must contain (the reason)
    alternatives: tuple[str, ...] = ()  # expected: other gates that may block it first, in pipeline order (see the catalog)
    # expected: other reasons the detail may hold instead of `detail` (a live class stopped by whichever metric its step judges)
    reasons: tuple[str, ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        if self.kind != BLOCKED:
            return self.kind
        if self.alternatives:
            return f"{BLOCKED} {' or '.join((self.gate, *self.alternatives))}"
        if self.gates:
            more = len(self.gates) - 1
            return f"{BLOCKED} {self.gate}" + (f" (+{more}: {', '.join(g for g in self.gates if g != self.gate)})" if more else "")
        return f"{BLOCKED} {self.gate}"

    def satisfies(self, expected: "Outcome") -> bool:
        """An actual outcome meets the expected one: same kind, for the stated reason if any, and for a block the expected gate among those
        that failed."""
        kinds = (ROLLOUT_ABORTED, ROLLOUT_PAUSED) if expected.kind == ROLLOUT_STOPPED else (expected.kind,)
        if self.kind not in kinds or not any(reason in self.detail for reason in (expected.detail, *expected.reasons)):
            return False
        return expected.kind != BLOCKED or bool({expected.gate, *expected.alternatives} & set(self.gates))


def blocked(gate: str, *alternatives: str) -> Outcome:
    return Outcome(BLOCKED, gate, alternatives=alternatives)


def blocked_by(gates: list[str], expected_gate: str | None = None, detail: str = "") -> Outcome:
    """An actual block; the expected gate is named first when it is among those that failed."""
    first = expected_gate if expected_gate in gates else gates[0]
    return Outcome(BLOCKED, first, tuple(gates), detail)
