"""lib/release/recalibration.revise on a real (SQLite) MLflow registry: each outcome, and a registry error that is never read as 'nothing
to do'."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from modelcd_assets.lib.errors import RegistryUnavailable
from modelcd_assets.lib.release.recalibration import NO_PRODUCTION, NOT_APPLICABLE, PENDING, REGISTERED, UP_TO_DATE, revise
from modelcd_assets.lib.release.registry import (
    CALIBRATION,
    CONTENT,
    KIND,
    PRODUCTION,
    REVISION_OF,
    ROLE,
    WEIGHTS_VERSION,
    CandidateRef,
    Registry,
)

DEFAULT, NEW = "d" * 64, "n" * 64


@pytest.fixture
def reg(tmp_path) -> Registry:
    return Registry(f"sqlite:///{tmp_path / 'mlflow.db'}", str(tmp_path / "artifacts"))


def version(reg: Registry, name: str, tags: dict[str, str]) -> CandidateRef:
    client: MlflowClient = reg.client
    if name not in {m.name for m in client.search_registered_models()}:
        client.create_registered_model(name, tags={ROLE: "candidate"})
    mv = client.create_model_version(name, source=f"file://{reg.artifact_location}", tags={KIND: "adapter", CONTENT: "c" * 64, **tags})
    return CandidateRef(name, str(mv.version))


def production(reg: Registry, ref: CandidateRef) -> CandidateRef:
    reg.client.set_registered_model_alias(ref.name, PRODUCTION, ref.version)
    return ref


def test_a_model_without_production_has_nothing_to_revise(reg):
    version(reg, "m", {})
    plan = revise(reg, "m", DEFAULT, "auto")
    assert (plan.action, plan.revision) == (NO_PRODUCTION, None)
    assert len(reg.versions("m")) == 1


def test_production_calibrated_with_the_current_set_is_up_to_date(reg):
    production(reg, version(reg, "m", {CALIBRATION: NEW}))
    reg.set_calibration("m", NEW)
    assert revise(reg, "m", DEFAULT, "auto").action == UP_TO_DATE
    assert len(reg.versions("m")) == 1


def test_a_version_gated_before_sets_were_pinned_counts_as_calibrated_with_the_default_split(reg):
    production(reg, version(reg, "m", {}))
    assert revise(reg, "m", DEFAULT, "auto").action == UP_TO_DATE  # the model has no set of its own: the default
    reg.set_calibration("m", NEW)
    assert revise(reg, "m", DEFAULT, "auto").action == REGISTERED


def test_a_new_set_registers_one_revision_with_production_files_and_the_set_pinned(reg):
    prod = production(reg, version(reg, "m", {CALIBRATION: DEFAULT}))
    reg.set_calibration("m", NEW)
    plan = revise(reg, "m", DEFAULT, "static")
    assert (plan.action, plan.production, plan.calibration_sha256) == (REGISTERED, prod.version, NEW)
    revision = CandidateRef("m", plan.revision)
    tags = reg.tags(revision)
    assert (tags[REVISION_OF], tags[WEIGHTS_VERSION], tags[CALIBRATION], tags[CONTENT]) == (prod.version, prod.version, NEW, "c" * 64)
    assert reg.version(revision).source == reg.version(prod).source  # the same registered files, not a copy
    again = revise(reg, "m", DEFAULT, "static")
    assert (again.action, again.revision) == (PENDING, plan.revision)  # its gates decide; no second revision
    assert len(reg.versions("m")) == 2
    # Once promoted, a revision of a revision carries the weights of the version first registered.
    production(reg, revision)
    reg.set_calibration("m", "x" * 64)
    third = revise(reg, "m", DEFAULT, "static")
    assert reg.tags(CandidateRef("m", third.revision))[WEIGHTS_VERSION] == prod.version


def test_with_dynamic_int8_pinned_no_set_is_used_so_nothing_is_revised(reg):
    production(reg, version(reg, "m", {CALIBRATION: DEFAULT}))
    reg.set_calibration("m", NEW)
    assert revise(reg, "m", DEFAULT, "dynamic").action == NOT_APPLICABLE
    assert len(reg.versions("m")) == 1


def test_a_registry_error_propagates_instead_of_reading_as_nothing_to_do(reg, monkeypatch):
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INTERNAL_ERROR

    production(reg, version(reg, "m", {CALIBRATION: DEFAULT}))

    def outage(self, name):
        raise MlflowException("(sqlite3.OperationalError) database is locked", error_code=INTERNAL_ERROR)

    monkeypatch.setattr(MlflowClient, "get_registered_model", outage)
    with pytest.raises(RegistryUnavailable, match="nothing was decided"):
        revise(reg, "m", DEFAULT, "static")
