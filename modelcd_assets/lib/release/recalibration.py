"""Calibration revisions: production's weights registered again under a model's new calibration set, to be gated.

A revision is a registry version like any other (so the registry sensor gates it, promotion moves the alias to it
and rollback treats it as any version), with production's registered files, the new set pinned, and tags naming
the version it re-quantizes and the version whose weights it carries. Nothing is retrained.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelcd_assets.lib.release.registry import CALIBRATION, Registry

REGISTERED, PENDING, UP_TO_DATE, NO_PRODUCTION, NOT_APPLICABLE = (
    "registered",
    "already registered",
    "up to date",
    "no production",
    "not applicable",
)


@dataclass(frozen=True)
class RevisionPlan:
    """What was done about one model: whether production needs a revision, and the revision version if there is one."""

    model: str
    action: str
    why: str
    production: str | None = None
    revision: str | None = None
    calibration_sha256: str | None = None


def revise(registry: Registry, name: str, default_set: str, pinned_variant: str) -> RevisionPlan:
    """Register a calibration revision of name's production when its current set is not the one production was calibrated with.

    default_set: the set of models with none of their own. pinned_variant: the policy's quantization.variant; with
    dynamic INT8 pinned, no set is ever used, so there is nothing to revise. A registry error propagates: nothing is guessed.
    """
    production = registry.production(name)
    if production is None:
        return RevisionPlan(
            name, NO_PRODUCTION, "no production version to re-quantize; the first candidate is calibrated with the current set"
        )
    current = registry.calibration_of(name) or default_set
    # Versions gated before sets were pinned per version were calibrated with the data folder's split.
    used = registry.tags(production).get(CALIBRATION, default_set)
    plan = dict(model=name, production=production.version, calibration_sha256=current)
    if used == current:
        return RevisionPlan(
            **plan, action=UP_TO_DATE, why=f"production {production.version} is calibrated with the current set {current[:12]}"
        )
    if pinned_variant == "dynamic":
        return RevisionPlan(**plan, action=NOT_APPLICABLE, why="the policy pins dynamic INT8, which uses no calibration set")
    if existing := registry.revisions_of(production).get(current):
        return RevisionPlan(
            **plan,
            action=PENDING,
            revision=existing.version,
            why=(
                f"version {existing.version} already re-quantizes production {production.version} with set {current[:12]}; its gates decide"
            ),
        )
    revision = registry.register_revision(production, current)
    return RevisionPlan(
        **plan,
        action=REGISTERED,
        revision=revision.version,
        why=(
            f"production {production.version} was calibrated with set {used[:12]}; version {revision.version} re-quantizes its weights with"
            f" {current[:12]}"
        ),
    )
