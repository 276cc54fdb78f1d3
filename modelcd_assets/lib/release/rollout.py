"""A rollout's moves: start, advance, pause, resume, abort, supersede, promote; each a new signed state written under the
model's alias lock, only over the state it was decided on (compare-and-set on the state's sequence).

What each step found on live traffic is kept beside the state, in the state folder (rollouts/<model>/<version>.json):
the step analyses production_model signs into the final attestation, and the gate report shows.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

from modelcd_assets.lib.errors import ModelcdError, Superseded
from modelcd_assets.lib.judging.live_analysis import FAIL, INCONCLUSIVE, NODATA, PASS, StepAnalysis
from modelcd_assets.lib.judging.rollout_policy import PROMOTE, RolloutPolicy
from modelcd_assets.lib.layout import StateLayout
from modelcd_assets.lib.release.alias_lock import AliasLock
from modelcd_assets.lib.release.registry import CandidateRef, Registry
from modelcd_assets.lib.release.rollout_state import (
    ABORTED,
    PAUSED,
    PROMOTED,
    RUNNING,
    SUPERSEDED,
    RolloutState,
    sign_state,
    verify_state,
)

START, ADVANCE, PAUSE, RESUME, ABORT, SUPERSEDE, FINISH = "start", "advance", "pause", "resume", "abort", "supersede", "promoted"
PROMOTE_AGAIN = "promote"  # the rollout stands at its promote step: nothing moves, and production_model runs again
ACTIONS = (START, ADVANCE, PAUSE, RESUME, ABORT, SUPERSEDE, PROMOTE_AGAIN, FINISH)


class RolloutMoved(Superseded):
    """The rollout's state is not the one a move was decided on: someone moved it first; nothing changed."""


def read_state(reg: Registry, model: str) -> RolloutState | None:
    """The model's rollout state, verified with the public key; None when it has none. BadSignature when it does not verify."""
    envelope = reg.rollout_envelope(model)
    return None if envelope is None else verify_state(envelope, reg.keys.require_public(), model)


def _step_state(policy: RolloutPolicy, base: dict, step: int) -> dict:
    s = policy.steps[step]
    return {**base, "step": step, "steps": len(policy.steps), "kind": s.kind, "share": s.share}


def started(
    ref: CandidateRef, against: str | None, policy: RolloutPolicy, policy_sha256: str, previous: RolloutState | None
) -> RolloutState:
    """The first step of ref's rollout against production `against`, after whatever state the model had."""
    base = {
        "model": ref.name,
        "version": ref.version,
        "against": against,
        "status": RUNNING,
        "since": time.time(),
        "sequence": previous.sequence + 1 if previous else 0,
        "policy_sha256": policy_sha256,
        "reason": "its offline gates passed",
    }
    return RolloutState(**_step_state(policy, base, 0))


def moved(state: RolloutState, action: str, policy: RolloutPolicy, reason: str) -> RolloutState:
    """The state after action (one of ACTIONS but START); a move the state does not allow is refused, naming both."""
    allowed = {
        ADVANCE: (RUNNING,),
        PAUSE: (RUNNING,),
        RESUME: (PAUSED,),
        ABORT: (RUNNING, PAUSED),
        SUPERSEDE: (RUNNING, PAUSED),
        FINISH: (RUNNING,),
        PROMOTE_AGAIN: (RUNNING,),
    }
    if action not in allowed:
        raise ModelcdError(f"{action!r} is not a rollout move; the moves are {', '.join(allowed)}")
    if state.status not in allowed[action]:
        raise ModelcdError(f"cannot {action} the rollout: {state.describe()} ({'; '.join(filter(None, [state.reason]))})")
    if action == PROMOTE_AGAIN:
        if state.kind != PROMOTE or state.status != RUNNING:
            raise ModelcdError(f"the rollout is not waiting at its promote step: {state.describe()}")
        return state
    if action == ADVANCE:
        if state.step + 1 >= len(policy.steps):
            raise ModelcdError(f"cannot advance the rollout past its last step: {state.describe()}")
        nxt = _step_state(policy, {}, state.step + 1)
        return state.moved(**nxt, reason=reason)
    if action == FINISH:
        if state.kind != PROMOTE:
            raise ModelcdError(f"the rollout is not at its promote step: {state.describe()}")
        return state.moved(status=PROMOTED, share=0.0, reason=reason)
    status = {PAUSE: PAUSED, RESUME: RUNNING, ABORT: ABORTED, SUPERSEDE: SUPERSEDED}[action]
    if action == RESUME:  # the step goes on from where it paused: its window keeps what it gathered
        return replace(state, status=status, sequence=state.sequence + 1, reason=reason)
    return state.moved(status=status, reason=reason)


def write_state(reg: Registry, state: RolloutState, expected: int | None, private_key: Path, lock: AliasLock) -> None:
    """Store state only if the model's current state has sequence `expected` (None: it has none), under the alias lock."""
    with lock.held(state.model):
        current = read_state(reg, state.model)
        now = None if current is None else current.sequence
        if now != expected:
            raise RolloutMoved(
                f"the rollout of {state.model} moved (state {now}, not {expected}) since this move was decided: "
                f"{current.describe() if current else 'it has none'}; nothing changed"
            )
        reg.put_rollout_envelope(state.model, sign_state(state, private_key))


@dataclass(frozen=True)
class Decision:
    action: str | None  # None: the step goes on
    reason: str


def decide(
    state: RolloutState, step_seconds: float, analysis: StepAnalysis, now: float | None = None, *, max_seconds: float | None = None
) -> Decision:
    """What a running step's analysis calls for: a critical failure aborts at once; at the step's end a pass advances,
    a failure aborts, and no verdict (too few samples, no data, a marginal score) pauses for a person. A step whose
    only want is samples (a metric without data) goes on gathering them past its end, up to max_seconds (None: not past
    its end), and pauses there if it still has no verdict."""
    elapsed = (time.time() if now is None else now) - state.since
    said = "; ".join(analysis.reasons) or f"score {analysis.score:.0f}"
    if analysis.outcome == FAIL and any(m.critical and m.failed for m in analysis.metrics):
        return Decision(ABORT, said)
    if elapsed < step_seconds:
        return Decision(None, f"{elapsed:.0f} of {step_seconds:g} s: {analysis.outcome} so far ({said})")
    wants_samples = analysis.outcome == INCONCLUSIVE and any(m.outcome == NODATA for m in analysis.metrics)
    if wants_samples and max_seconds is not None and elapsed < max_seconds:
        return Decision(None, f"{elapsed:.0f} s, past {step_seconds:g} s and up to {max_seconds:g} s: gathering samples ({said})")
    action = {PASS: ADVANCE, FAIL: ABORT, INCONCLUSIVE: PAUSE}[analysis.outcome]
    return Decision(action, said)


class RolloutHistory:
    """The steps of one version's rollout as judged, in order: a JSON list, replaced atomically."""

    def __init__(self, state_root: Path, model: str, version: str):
        self.path = StateLayout(Path(state_root)).rollout(model, version)

    def read(self) -> list[dict]:
        if not self.path.is_file():
            return []
        try:
            return json.loads(self.path.read_text())
        except ValueError as e:
            raise ModelcdError(f"the rollout history {self.path} is not readable JSON ({e}); its steps cannot be shown or signed") from e

    def append(self, entry: dict) -> None:
        entries = [*self.read(), entry]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entries, indent=1, sort_keys=True))
        tmp.replace(self.path)

    def restart(self) -> None:
        """A new rollout of the version forgets the old one's steps."""
        self.path.unlink(missing_ok=True)
