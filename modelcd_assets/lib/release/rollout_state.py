"""A rollout's state: which version takes which share of a model's live traffic, and how, signed and kept in the registry.

The state is a DSSE envelope on the registered model (the tag modelcd.rollout), so every replica of the server follows the
same shares, as each follows the production alias. Only the rollout's own runs write it, with the private key. A reader
verifies it with the public key, and then checks that the version it names holds a signed offline verdict over the bytes
it would serve. A state that fails either check is not followed: the server keeps serving production alone. No Dagster
here: the serving process imports this module.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from modelcd_assets.lib.release.signing import BadSignature, sign_envelope, verify_envelope

PAYLOAD_TYPE = "application/vnd.modelcd.rollout-state+json"
SHADOW, CANARY, PROMOTE = "shadow", "canary", "promote"
RUNNING, PAUSED, ABORTED, PROMOTED, SUPERSEDED = "running", "paused", "aborted", "promoted", "superseded"
# While running or paused (an inconclusive step waits for a person, its share still served so evidence accrues), the
# step's share goes to the candidate; once ended, none does.
SERVING = (RUNNING, PAUSED)
STATUSES = (RUNNING, PAUSED, ABORTED, PROMOTED, SUPERSEDED)


@dataclass(frozen=True)
class RolloutState:
    """One rollout of `version` of `model`, started against production `against`, at step `step` (0-based) of `steps`."""

    model: str
    version: str
    against: str | None
    step: int
    steps: int
    kind: str
    share: float
    status: str
    since: float  # when this step (or status) began, seconds since the epoch
    sequence: int  # grows by one with every state written for the model: a reader never goes back to an older one
    policy_sha256: str
    reason: str = ""

    def __post_init__(self) -> None:
        if self.kind not in (SHADOW, CANARY, PROMOTE):
            raise ValueError(f"a rollout step is shadow, canary or promote, not {self.kind!r}")
        if self.status not in STATUSES:
            raise ValueError(f"a rollout's status is one of {', '.join(STATUSES)}, not {self.status!r}")
        if not 0 <= self.share <= 1 or (self.kind == CANARY and self.share >= 1):
            raise ValueError(f"a {self.kind} share must be in [0, 1{')' if self.kind == CANARY else ']'}, not {self.share}")
        if not 0 <= self.step < self.steps:
            raise ValueError(f"step {self.step} is not one of the rollout's {self.steps} steps")

    @property
    def serving_share(self) -> float:
        """The share of requests that reach the candidate (answered at a canary step, copied at a shadow step) now."""
        return self.share if self.status in SERVING and self.kind in (SHADOW, CANARY) else 0.0

    def moved(self, **changes) -> "RolloutState":
        """The next state: these changes, the sequence one higher, `since` now."""
        return RolloutState(**{**asdict(self), "since": time.time(), **changes, "sequence": self.sequence + 1})

    def describe(self) -> str:
        where = f"step {self.step + 1}/{self.steps} ({self.kind}" + (f" {self.share:g})" if self.kind != PROMOTE else ")")
        return f"{self.model} v{self.version} {self.status} at {where} against production v{self.against or 'none'}"


def sign_state(state: RolloutState, private_key: Path) -> dict:
    return sign_envelope(asdict(state), PAYLOAD_TYPE, private_key)


def verify_state(envelope: dict, public_key: Path, model: str) -> RolloutState:
    """The state an envelope carries, if the public key's pair signed it and it is about model; BadSignature otherwise."""
    what = f"the rollout state of {model}"
    payload_type, payload = verify_envelope(envelope, public_key, what, "modelcd's rollout")
    if payload_type != PAYLOAD_TYPE:
        raise BadSignature(f"{what} is not a modelcd rollout state (payload {payload_type})")
    try:
        state = RolloutState(**payload)
    except (TypeError, ValueError) as e:
        raise BadSignature(f"{what} is signed but malformed ({e}): refusing it") from e
    if state.model != model:
        raise BadSignature(f"{what} is about {state.model}, not {model}: refusing it")
    return state
