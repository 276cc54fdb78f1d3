"""The MLflow registry client against a real SQLite-backed MLflow."""

import pytest
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INTERNAL_ERROR

from modelcd_assets.lib.errors import BadCandidate, ModelcdError, RegistryUnavailable, Superseded
from modelcd_assets.lib.release.registry import CONTENT, KIND, PREVIOUS_PRODUCTION, PROMOTION, CandidateRef
from modelcd_assets_tests.conftest import TEST_LOCK


def test_register_fetch_and_alias(modelcd_env, tiny_base, tmp_path):
    reg = modelcd_env.registry
    ref = reg.register(tiny_base, "m")
    assert ref == CandidateRef("m", "1") and ref.key == "m:1"
    tags = reg.tags(ref)
    assert tags[KIND] == "full" and len(tags[CONTENT]) == 64
    got = reg.fetch(ref, tmp_path / "fetched")
    assert (got / "model.safetensors").read_bytes() == (tiny_base / "model.safetensors").read_bytes()
    assert reg.production("m") is None
    assert reg.move_production(ref, {"why": "test"}, expected=None, lock=TEST_LOCK) is None
    assert reg.production("m") == ref
    ref2 = reg.register(tiny_base, "m")
    assert reg.move_production(ref2, {"why": "test"}, expected=ref, lock=TEST_LOCK) == ref
    assert reg.tags(ref2)["modelcd.previous_production"] == "1"
    assert reg.versions("m") == [ref, ref2]
    assert reg.candidate_models() == ["m"]


def test_fetch_refuses_files_changed_after_registration(modelcd_env, tiny_base, tmp_path):
    reg = modelcd_env.registry
    ref = reg.register(tiny_base, "m")
    source = reg.version(ref).source.removeprefix("file://")
    with open(f"{source}/config.json", "a") as f:
        f.write(" ")
    with pytest.raises(BadCandidate, match="config.json' \\(contents changed\\)"):
        reg.fetch(ref, tmp_path / "fetched")


def test_adapter_needs_a_registered_base(modelcd_env, tiny_adapters):
    reg = modelcd_env.registry
    with pytest.raises(ModelcdError, match="models:/tiny-base/1 is not in the registry"):
        reg.register(tiny_adapters["good"], "m")


def test_role_clash_and_bad_references(modelcd_env, tiny_base):
    reg = modelcd_env.registry
    reg.register(tiny_base, "b", role="base")
    with pytest.raises(ModelcdError, match="is a base model, not a candidate"):
        reg.register(tiny_base, "b")
    with pytest.raises(ModelcdError, match="expected NAME:VERSION"):
        CandidateRef.parse("no-version")
    with pytest.raises(ModelcdError, match="expected models:/NAME/VERSION"):
        CandidateRef.from_uri("hf://x")
    with pytest.raises(ModelcdError, match="not in the registry"):
        reg.version(CandidateRef("b", "7"))


@pytest.mark.parametrize("fault", [MlflowException("database is locked", error_code=INTERNAL_ERROR), ConnectionError("connection refused")])
def test_a_registry_error_is_not_no_production(modelcd_env, tiny_base, monkeypatch, fault):
    reg = modelcd_env.registry
    ref = reg.register(tiny_base, "m")
    reg.move_production(ref, {"why": "test"}, expected=None, lock=TEST_LOCK)

    def broken(name):
        raise fault

    monkeypatch.setattr(reg.client, "get_registered_model", broken)
    with pytest.raises(RegistryUnavailable, match="could not read the production alias of 'm'.*nothing was decided"):
        reg.production("m")


def test_only_the_registry_saying_so_means_no_production(modelcd_env, tiny_base):
    reg = modelcd_env.registry
    assert reg.production("never-registered") is None
    reg.register(tiny_base, "m")
    assert reg.production("m") is None


def test_promotion_is_compare_and_set(modelcd_env, tiny_base):
    reg = modelcd_env.registry
    v1, v2, v3 = (reg.register(tiny_base, "m") for _ in range(3))
    reg.move_production(v1, {"why": "test"}, expected=None, lock=TEST_LOCK)
    reg.move_production(v2, {"why": "judged against 1"}, expected=v1, lock=TEST_LOCK)
    with pytest.raises(Superseded, match="production of m moved from 1 to 2 while models:/m/3 was gated; re-gate it against 2"):
        reg.move_production(v3, {"why": "judged against 1"}, expected=v1, lock=TEST_LOCK)
    assert reg.production("m") == v2
    assert PROMOTION not in reg.tags(v3) and PREVIOUS_PRODUCTION not in reg.tags(v3)


def test_promoting_what_is_already_production_keeps_the_chain(modelcd_env, tiny_base):
    """A re-gate after a crash past the alias move must not record the version as its own previous production."""
    reg = modelcd_env.registry
    v1, v2 = reg.register(tiny_base, "m"), reg.register(tiny_base, "m")
    reg.move_production(v1, {"why": "test"}, expected=None, lock=TEST_LOCK)
    reg.move_production(v2, {"why": "first"}, expected=v1, lock=TEST_LOCK)
    assert reg.move_production(v2, {"why": "again"}, expected=v2, lock=TEST_LOCK) == v2
    assert reg.tags(v2)[PREVIOUS_PRODUCTION] == "1" and "first" in reg.tags(v2)[PROMOTION]


@pytest.fixture
def closed_registry(modelcd_env, monkeypatch):
    """A Registry on a tracking URI nothing listens on (a port bound and closed), with MLflow's HTTP retries off."""
    from modelcd_assets.lib.release.registry import Registry
    from modelcd_assets_tests.conftest import closed_port_uri

    return Registry(closed_port_uri(monkeypatch), modelcd_env.env["MODELCD_MLFLOW_ARTIFACTS"])


@pytest.mark.parametrize(
    "call, what",
    [
        (lambda reg, art: reg.version(CandidateRef("m", "1")), "could not read models:/m/1"),
        (lambda reg, art: reg.tags(CandidateRef("m", "1")), "could not read models:/m/1"),
        (lambda reg, art: reg.register(art, "m"), "could not read registered model 'm'"),
        (lambda reg, art: reg.calibration_of("m"), "could not read the calibration set of 'm'"),
        (lambda reg, art: reg.candidate_models(), "could not list the registered models"),
        (lambda reg, art: reg.require_candidate_model("m"), "could not list the registered models"),
    ],
)
def test_a_registry_on_a_closed_port_is_unavailable_not_a_missing_version(closed_registry, tiny_base, call, what):
    """Issue 17: 'not in the registry' (exit 2, bad input) only when the registry answers so; no answer decides nothing."""
    with pytest.raises(RegistryUnavailable) as e:
        call(closed_registry, tiny_base)
    message = str(e.value)
    assert message.startswith(f"{what} from http://user:***@127.0.0.1:") or message.startswith(f"{what} in http://user:***@127.0.0.1:"), (
        message
    )
    assert message.endswith("retry when the registry answers") and "secret" not in message


@pytest.mark.parametrize(
    "fault, shown",
    [
        (MlflowException("database is locked", error_code=INTERNAL_ERROR), "database is locked"),
        (ConnectionError("connection refused"), "ConnectionError: connection refused"),
    ],
)
def test_only_resource_does_not_exist_means_a_version_is_missing(modelcd_env, tiny_base, monkeypatch, fault, shown):
    reg = modelcd_env.registry
    ref = reg.register(tiny_base, "m")

    def broken(name, version):
        raise fault

    monkeypatch.setattr(reg.client, "get_model_version", broken)
    with pytest.raises(RegistryUnavailable) as e:
        reg.version(ref)
    assert str(e.value) == f"could not read models:/m/1 from {reg.shown_uri}: {shown}; nothing was decided, retry when the registry answers"
    monkeypatch.undo()
    with pytest.raises(ModelcdError, match=r"models:/m/2 is not in the registry at .*; check the name and version with 'modelcd status'"):
        reg.version(CandidateRef("m", "2"))


def test_a_registry_error_reading_the_model_never_creates_it(modelcd_env, tiny_base, monkeypatch):
    """_ensure_registered created the model on any error; on a database error that is a write decided on no answer."""
    reg = modelcd_env.registry
    reg.register(tiny_base, "b", role="base")
    created = []

    def broken(name):
        raise MlflowException("database is locked", error_code=INTERNAL_ERROR)

    monkeypatch.setattr(reg.client, "get_registered_model", broken)
    monkeypatch.setattr(reg.client, "create_registered_model", lambda *a, **k: created.append(a))
    with pytest.raises(
        RegistryUnavailable, match=r"^could not read registered model 'b' from .*: database is locked; nothing was registered"
    ):
        reg.register(tiny_base, "b")
    assert created == []
    assert reg.versions("b") == [CandidateRef("b", "1")]


def test_a_registry_error_listing_models_is_not_no_models(modelcd_env, monkeypatch):
    reg = modelcd_env.registry

    def broken(**kwargs):
        raise MlflowException("database is locked", error_code=INTERNAL_ERROR)

    monkeypatch.setattr(reg.client, "search_registered_models", broken)
    with pytest.raises(
        RegistryUnavailable, match=r"^could not list the registered models from .*: database is locked; nothing was decided"
    ):
        reg.candidate_models()
    with pytest.raises(RegistryUnavailable):
        reg.require_candidate_model("m")


def test_a_move_that_reads_back_as_another_is_lost_and_leaves_no_promotion_record(modelcd_env, tiny_base, monkeypatch):
    """A writer that skips the lock moves the alias right after this move's set: the read-back fails the move loudly, and the
    version the alias did not keep is not left tagged as promoted."""
    from modelcd_assets.lib.release.alias_lock import AliasMoveLost

    reg = modelcd_env.registry
    v1, v2, rogue = (reg.register(tiny_base, "m") for _ in range(3))
    reg.move_production(v1, {"why": "test"}, expected=None, lock=TEST_LOCK)
    set_alias = reg.client.set_registered_model_alias

    def and_then_another_writer(name, alias, version):
        set_alias(name, alias, version)
        set_alias(name, alias, rogue.version)

    monkeypatch.setattr(reg.client, "set_registered_model_alias", and_then_another_writer)
    with pytest.raises(
        AliasMoveLost,
        match=r"set to 2 under flock under .*, but read back it points at 3 .* another writer moved it without "
        r"the lock. The promotion record on models:/m/2 was removed. Check the chain with 'modelcd audit m'",
    ):
        reg.move_production(v2, {"why": "judged against 1"}, expected=v1, lock=TEST_LOCK)
    assert PROMOTION not in reg.tags(v2) and PREVIOUS_PRODUCTION not in reg.tags(v2)


def test_a_move_whose_previous_production_was_rewritten_is_lost(modelcd_env, tiny_base, monkeypatch):
    from modelcd_assets.lib.release.alias_lock import AliasMoveLost

    reg = modelcd_env.registry
    v1, v2 = (reg.register(tiny_base, "m") for _ in range(2))
    reg.move_production(v1, {"why": "test"}, expected=None, lock=TEST_LOCK)
    set_alias = reg.client.set_registered_model_alias

    def and_then_the_record_is_rewritten(name, alias, version):
        set_alias(name, alias, version)
        reg.client.set_model_version_tag(name, version, PREVIOUS_PRODUCTION, "7")

    monkeypatch.setattr(reg.client, "set_registered_model_alias", and_then_the_record_is_rewritten)
    with pytest.raises(AliasMoveLost, match=r"points at 2 and models:/m/2 records 7 as its previous production where the move compared 1"):
        reg.move_production(v2, {"why": "judged against 1"}, expected=v1, lock=TEST_LOCK)
    assert reg.production("m") == v2  # the alias did reach it: its record stays, for the audit to show


# Every public call that reaches the registry, each as a user's command would make it (issue 28: one translator of registry errors).
_CALLS = {
    "version": lambda reg, ref, art: reg.version(ref),
    "tags": lambda reg, ref, art: reg.tags(ref),
    "set_tags": lambda reg, ref, art: reg.set_tags(ref, {"modelcd.note": "x"}),
    "fetch": lambda reg, ref, art: reg.fetch(ref, art.parent / "fetched"),
    "register": lambda reg, ref, art: reg.register(art, "m"),
    "production": lambda reg, ref, art: reg.production("m"),
    "productions": lambda reg, ref, art: reg.productions(),
    "move_production": lambda reg, ref, art: reg.move_production(ref, {"why": "test"}, expected=ref, lock=TEST_LOCK),
    "versions": lambda reg, ref, art: reg.versions("m"),
    "tags_by_version": lambda reg, ref, art: reg.tags_by_version("m"),
    "candidate_versions": lambda reg, ref, art: reg.candidate_versions(["m"]),
    "candidate_models": lambda reg, ref, art: reg.candidate_models(),
    "calibration_of": lambda reg, ref, art: reg.calibration_of("m"),
    "set_calibration": lambda reg, ref, art: reg.set_calibration("m", "0" * 64),
    "register_revision": lambda reg, ref, art: reg.register_revision(ref, "0" * 64),
    "revisions_of": lambda reg, ref, art: reg.revisions_of(ref),
    "remove_tags": lambda reg, ref, art: reg.remove_tags(ref, ["modelcd.note"]),
    "attestation": lambda reg, ref, art: reg.attestation(ref),
    "put_attestation": lambda reg, ref, art: reg.put_attestation(ref, {"payload": "x"}),
}


@pytest.mark.parametrize("call", sorted(_CALLS))
def test_every_registry_call_turns_a_registry_error_into_registry_unavailable(modelcd_env, tiny_base, monkeypatch, call):
    """Before, set_tags, versions, the revision and attestation writes and others let MLflow's own exception through: the CLI
    and the run outcome had to recognise it by its name. Each registry method here fails as a locked database would."""
    import mlflow

    reg = modelcd_env.registry
    ref = reg.register(tiny_base, "m")
    reg.move_production(ref, {"why": "test"}, expected=None, lock=TEST_LOCK)

    def broken(*args, **kwargs):
        raise MlflowException("(sqlite3.OperationalError) database is locked", error_code=INTERNAL_ERROR)

    for method in [m for m in dir(reg.client) if not m.startswith("_") and callable(getattr(reg.client, m))]:
        monkeypatch.setattr(reg.client, method, broken)
    monkeypatch.setattr(mlflow.artifacts, "download_artifacts", broken)
    with pytest.raises(RegistryUnavailable) as e:
        _CALLS[call](reg, ref, tiny_base)
    assert "database is locked" in str(e.value) and str(e.value).endswith("retry when the registry answers"), str(e.value)


def test_only_the_registrys_not_found_is_not_in_registry(modelcd_env, tiny_base):
    from modelcd_assets.lib.release.registry import NotInRegistry

    reg = modelcd_env.registry
    with pytest.raises(NotInRegistry, match=r"^could not read the calibration set of 'nobody' from .*nobody"):
        reg.calibration_of("nobody")
    assert reg.versions("nobody") == [] and reg.production("nobody") is None
