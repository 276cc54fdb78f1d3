"""The audit of a model's production chain: from production back to the first version, every move checked against its records.

Every move of the alias records, on the version it moved to, why (`modelcd.promotion`, JSON) and the version it moved from
(`modelcd.previous_production`). The audit walks that chain from production back and checks each link:

- the version has a move record (a version in the chain without one was reached by a hand-made alias move);
- a promotion was judged against the version it moved from (`judged_against`), and carries a signed attestation whose
  verdict is about this version, was judged against that same version, and was written by the same run;
- a rollback moved from the version it names (`rollback_from`), and that version is marked rolled back from.

Then no version may keep a move record without being in the chain (a promotion that was overwritten by a race). A rollback
overwrites its target's earlier record, so past a rollback the registry no longer holds the chain: the audit says so, and
does not judge versions it cannot reach.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from modelcd_assets.lib.release import attestation
from modelcd_assets.lib.release.registry import PREVIOUS_PRODUCTION, PROMOTION, ROLLED_BACK, CandidateRef, Registry
from modelcd_assets.lib.release.signing import BadSignature


@dataclass(frozen=True)
class ChainAudit:
    """What the audit found for one model: the chain, production first, and every broken link, each naming its versions."""

    name: str
    production: str | None
    chain: tuple[str, ...]
    problems: tuple[str, ...]
    unseen: str = ""  # why part of the history could not be checked (past a rollback), "" when all of it was

    @property
    def intact(self) -> bool:
        return not self.problems

    @property
    def shown(self) -> str:
        """One line: the chain as walked, then intact or every problem."""
        walked = " <- ".join(self.chain) or "no production"
        verdict = "intact" if self.intact else "BROKEN: " + "; ".join(self.problems)
        return f"{self.name}: {walked}: {verdict}" + (f" ({self.unseen})" if self.unseen else "")

    def to_dict(self) -> dict:
        return {
            "model": self.name,
            "production": self.production,
            "chain": list(self.chain),
            "intact": self.intact,
            "problems": list(self.problems),
            "unseen": self.unseen,
        }


def _record(tags: dict[str, str]) -> dict | None:
    try:
        value = json.loads(tags[PROMOTION])
    except (KeyError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _attestation_problems(registry: Registry, ref: CandidateRef, previous: str, run_id: str | None) -> list[str]:
    """Why ref's attestation does not back its promotion from previous by run_id; [] when it does."""
    envelope = registry.attestation(ref)
    if envelope is None:
        return [f"{ref.version} was promoted but has no attestation"]
    try:
        verdict = attestation.verify(envelope, registry.keys.require_public(), ref.uri)
    except BadSignature as e:
        return [f"{ref.version}'s attestation does not verify: {e}"]
    found = []
    if (verdict.model, verdict.version) != (ref.name, ref.version):
        found.append(f"{ref.version}'s attestation is about {verdict.model}/{verdict.version}")
    attested_against = str((verdict.judged_against or {}).get("version") or "")
    if attested_against != previous:
        found.append(
            f"{ref.version}'s attestation was judged against {attested_against or 'nothing'}, but the alias moved to it from"
            f" {previous or 'nothing'}"
        )
    if run_id and verdict.run_id != run_id:
        found.append(f"{ref.version}'s attestation was written by run {verdict.run_id}, its promotion record by run {run_id}")
    return found


def _link_problems(
    registry: Registry, ref: CandidateRef, tags: dict[str, str], previous: str, tags_of: Callable[[str], dict[str, str]]
) -> list[str]:
    record = _record(tags)
    if record is None:
        return [f"{ref.version} is in the chain but has no readable {PROMOTION} record: the alias was moved to it by hand"]
    if "rollback_from" in record:
        found = []
        if str(record["rollback_from"]) != previous:
            found.append(
                f"{ref.version} records a rollback from {record['rollback_from']}, but the alias moved to it from {previous or 'nothing'}"
            )
        if previous and ROLLED_BACK not in tags_of(previous):
            found.append(f"{ref.version} was rolled back to from {previous}, which is not marked {ROLLED_BACK}")
        return found
    judged = str(record.get("judged_against") or "")
    if judged != previous:
        return [f"{ref.version} was promoted judged against {judged or 'nothing'}, but the alias moved to it from {previous or 'nothing'}"]
    return _attestation_problems(registry, ref, previous, record.get("run_id"))


def audit(registry: Registry, name: str) -> ChainAudit:
    """Walk name's chain from production back and check every link; RegistryUnavailable propagates (not checked is not intact)."""
    production = registry.production(name)
    tags_by_version = registry.tags_by_version(name)

    def tags_of(version: str) -> dict[str, str]:
        return tags_by_version.get(version, {})

    chain: list[str] = []
    problems: list[str] = []
    unseen = ""
    version = production.version if production else ""
    while version:
        if version in chain:  # back at a version a rollback moved to: its earlier record was overwritten
            unseen = f"the history before the rollback to {version} is not kept in the registry"
            break
        if version not in tags_by_version:
            problems.append(f"{chain[-1]} records {version} as its previous production, which is not a version of {name}")
            break
        chain.append(version)
        tags = tags_of(version)
        previous = tags.get(PREVIOUS_PRODUCTION, "")
        problems += _link_problems(registry, CandidateRef(name, version), tags, previous, tags_of)
        if PREVIOUS_PRODUCTION not in tags:
            break
        version = previous
    if any("rollback_from" in (_record(tags_of(v)) or {}) for v in chain):
        unseen = unseen or "a rollback overwrote its target's earlier record, so versions promoted before it are not judged"
    else:
        stray = sorted((v for v, t in tags_by_version.items() if PROMOTION in t and v not in chain), key=int)
        problems += [
            f"{v} is tagged as promoted ({PROMOTION}) but is not in the chain from production: its move was overwritten" for v in stray
        ]
    return ChainAudit(name, production.version if production else None, tuple(chain), tuple(problems), unseen)
