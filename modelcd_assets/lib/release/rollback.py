"""Rolling production back: to the most recent earlier version that passed its gates, recording why."""

from __future__ import annotations

import json
from typing import Callable

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.operations.failpoints import failpoint
from modelcd_assets.lib.release.alias_lock import AliasLock
from modelcd_assets.lib.release.registry import PREVIOUS_PRODUCTION, ROLLED_BACK, CandidateRef, Registry


def rollback_order(registry: Registry, bad: CandidateRef) -> list[CandidateRef]:
    """Versions to consider, best first: the chain of previous production versions, then older versions, newest first."""
    order, seen = [], {bad.version}
    version = registry.tags(bad).get(PREVIOUS_PRODUCTION)
    while version and version not in seen:
        seen.add(version)
        ref = CandidateRef(bad.name, version)
        order.append(ref)
        version = registry.tags(ref).get(PREVIOUS_PRODUCTION)
    older = [r for r in reversed(registry.versions(bad.name)) if int(r.version) < int(bad.version) and r.version not in seen]
    return order + older


def rollback_target(
    registry: Registry, bad: CandidateRef, gate_problems_of: Callable[[CandidateRef], list[str]]
) -> tuple[CandidateRef, dict[str, str]]:
    """The version to roll back to, and why each version tried before it was passed over."""
    passed_over: dict[str, str] = {}
    for ref in rollback_order(registry, bad):
        tags = registry.tags(ref)
        if ROLLED_BACK in tags:
            passed_over[ref.version] = "production was rolled back from it before"
            continue
        problems = gate_problems_of(ref)
        if problems:
            passed_over[ref.version] = "; ".join(problems[:3])
            continue
        return ref, passed_over
    detail = "; ".join(f"{v}: {why}" for v, why in passed_over.items()) or "there are no earlier versions"
    raise ModelcdError(
        f"no earlier version of {bad.name} passed its gates ({detail}); production stays at {bad.version}: fix forward with a new candidate"
    )


def roll_back(registry: Registry, bad: CandidateRef, target: CandidateRef, reason: dict, lock: AliasLock) -> None:
    """Mark bad as rolled back from and point production at target under the alias's lock, both with the reason."""
    registry.set_tags(bad, {ROLLED_BACK: json.dumps(reason, sort_keys=True)})
    failpoint("mid_rollback")
    registry.move_production(target, {"rollback_from": bad.version, **reason}, expected=bad, lock=lock)
