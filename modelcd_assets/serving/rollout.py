"""Follows a model's rollout: the signed state in the registry (lib/release/rollout_state.py) says which version takes
which share of requests, as a canary (it answers them) or a shadow (it answers copies, never returned).

Every replica follows the same state, so Prometheus sums each arm across replicas. The state is followed only when it
verifies with the public key, is newer than the last one followed, was started against the production this server
serves, and names a version the pool loads, which it does only with a valid verdict over that version's bytes. Otherwise
the server serves production alone, and the refusal is logged and counted (modelcd_rollout_refused_total, by reason).
A registry that cannot be read also leaves production alone: what could not be checked gets no traffic.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from dataclasses import dataclass

from modelcd_assets.lib.release.registry import Registry
from modelcd_assets.lib.release.rollout_state import CANARY, SHADOW, RolloutState, verify_state
from modelcd_assets.serving import CALLER_HEADER
from modelcd_assets.serving.versions import ServedVersion, UnknownVersion

log = logging.getLogger("modelcd.serve")
REFUSALS = ("unverified", "stale", "production_moved", "not_servable", "registry_unavailable")


def caller_of(request, user: str | None = None) -> str:
    """Who a request is from: the API's own field for it (OpenAI's `user`), else the X-Modelcd-Caller header, else the client's address."""
    return user or request.headers.get(CALLER_HEADER) or (request.client.host if request.client else "")


def bucket(model: str, caller: str) -> float:
    """Where a caller falls in [0, 1): the same for every replica and every step, so a caller in a 5% canary stays in at 25%."""
    digest = hashlib.sha256(f"{model}\0{caller}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True)
class Split:
    """The share of requests a rollout's candidate takes now, and how."""

    model: str
    version: str
    kind: str
    share: float
    sequence: int
    against: str | None

    def canaried(self, caller: str) -> bool:
        """Whether this caller's requests are answered by the candidate."""
        return self.kind == CANARY and bucket(self.model, caller) < self.share

    def shadowed(self) -> bool:
        """Whether a copy of this request goes to the candidate."""
        return self.kind == SHADOW and random.random() < self.share


class RolloutFollower:
    """Polls the registry for the model's rollout state and loads its candidate beside production."""

    def __init__(self, registry: Registry, model: str, swapper, metrics):
        self.registry, self.model, self.swapper, self.metrics = registry, model, swapper, metrics
        self.split: Split | None = None
        self.state: RolloutState | None = None  # the last state followed
        self.refused: str | None = None  # why the last state read is not followed
        for reason in REFUSALS:
            metrics.rollout_refused.labels(model, reason)

    def candidate(self) -> ServedVersion | None:
        """The candidate's loaded version while it takes a share, else None (then production answers alone)."""
        split = self.split
        if split is None:
            return None
        try:
            return self.swapper.pool.resolve(split.version)
        except UnknownVersion:  # unloaded or withdrawn meanwhile
            return None

    def _refuse(self, reason: str, why: str) -> None:
        if self.refused != why:
            log.error("rollout of %s not followed (%s): %s; production alone answers", self.model, reason, why)
        self.refused = why
        self.metrics.rollout_refused.labels(self.model, reason).inc()
        self._publish(None)

    def _publish(self, split: Split | None) -> None:
        if split != self.split:
            log.info("rollout of %s: %s", self.model, f"{split.kind} {split.share:g} to version {split.version}" if split else "none")
        self.split = split
        self.metrics.rollout_share.labels(self.model, "shadow").set(split.share if split and split.kind == SHADOW else 0)
        self.metrics.rollout_share.labels(self.model, "canary").set(split.share if split and split.kind == CANARY else 0)

    async def poll_once(self) -> Split | None:
        loop = asyncio.get_running_loop()
        try:
            envelope = await loop.run_in_executor(None, self.registry.rollout_envelope, self.model)
        except Exception as e:  # unreadable: nothing unchecked takes traffic
            self._refuse("registry_unavailable", f"cannot read the rollout state: {e}")
            return None
        if envelope is None:
            self.refused = None
            self._publish(None)
            return None
        try:
            state = verify_state(envelope, self.registry.keys.require_public(), self.model)
        except Exception as e:  # BadSignature, MissingKey: not followed
            self._refuse("unverified", str(e))
            return None
        if self.state is not None and state.sequence < self.state.sequence:
            self._refuse("stale", f"state {state.sequence} is older than state {self.state.sequence}, already followed")
            return None
        production = self.swapper.pool.active
        if state.serving_share == 0:
            self.state, self.refused = state, None
            self._publish(None)
            return None
        if production is None or state.against != production.version:
            self._refuse(
                "production_moved",
                f"{state.describe()}, but this server serves production v{production.version if production else 'none'}",
            )
            return None
        try:
            if state.version not in {s.version for s in self.swapper.pool.loaded()}:
                await self.swapper.swap_async(state.version, activate=False)
            self.swapper.pool.resolve(state.version)
        except Exception as e:  # no valid verdict over its bytes (NotServable, SwapRefused), or withdrawn: never served
            self._refuse("not_servable", f"version {state.version} may not take a share: {e}")
            return None
        self.state, self.refused = state, None
        self._publish(Split(self.model, state.version, state.kind, state.serving_share, state.sequence, state.against))
        return self.split

    def failed(self) -> None:
        """A poll that raised (a bug, not a refusal): said, and production alone answers until a poll succeeds."""
        log.exception("following the rollout of %s failed", self.model)
        self._publish(None)
