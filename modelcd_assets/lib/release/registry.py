"""The MLflow model registry as modelcd uses it: versions, content manifests, the production alias."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from modelcd_assets.lib.errors import BadCandidate, ModelcdError, RegistryUnavailable, Superseded
from modelcd_assets.lib.hashing import folder_manifest, manifest_hash
from modelcd_assets.lib.judging.safety import SafetyLimits, scan_artifact
from modelcd_assets.lib.operations.failpoints import failpoint
from modelcd_assets.lib.release.alias_lock import AliasLock, AliasMoveLost
from modelcd_assets.lib.release.artifact import ADAPTER, inspect_artifact
from modelcd_assets.lib.release.signing import SIGNATURE_FILE, Keys, sign_folder, verify_folder
from modelcd_assets.lib.tasks.adapter_files import refuse_unlisted_files
from modelcd_assets.lib.tasks.names import DEFAULT_TASK, require_task, task_of_adapter, task_of_folder

PRODUCTION = "production"
EXPERIMENT = "modelcd-registrations"
# Tag names on registered models and versions.
ROLE = "modelcd.role"  # "base" or "candidate" on a registered model
KIND = "modelcd.kind"  # "adapter", "full" or "base" on a version
TASK = "modelcd.task"  # the task of a version (lib/tasks/names): a base or full model declares it, its adapters carry the base's
BASE = "modelcd.base"  # models:/NAME/VERSION of an adapter's base
CONTENT = "modelcd.content_sha256"
TOKENIZER_CHANGE = "modelcd.tokenizer_change"  # "true" when a version declares that its tokenizer maps text to new ids
SEMVER_DECLARED = "modelcd.semver_declared"  # MAJOR.MINOR.PATCH given at registration
BUMP_DECLARED = "modelcd.bump_declared"  # or a bump level given at registration
SEMVER = "modelcd.semver"  # the version's resolved Model SemVer
CONTRACT = "modelcd.contract"  # the I/O contract as JSON
PROMOTION = "modelcd.promotion"  # why the alias last moved to a version, as JSON
PREVIOUS_PRODUCTION = "modelcd.previous_production"  # the version production pointed to before
ROLLED_BACK = "modelcd.rolled_back"  # on a version production was rolled back from: why, as JSON
# Calibration: on a registered model, its current set; on a version, the set that calibrated its INT8 (pinned when first gated).
CALIBRATION = "modelcd.calibration_sha256"
ROLLOUT = "modelcd.rollout"  # on a registered model: its rollout's signed state (lib/release/rollout_state.py), JSON
REVISION_OF = "modelcd.revision_of"  # on a calibration revision: the production version it re-quantizes
WEIGHTS_VERSION = "modelcd.weights_version"  # on a calibration revision: the version whose weights it carries (the first one registered)
MANIFEST_FILE = "modelcd_manifest.json"
ATTESTATION_DIR = "attestations"  # run artifacts: <version>.intoto.json, the signed verdict written at promotion
DECIDED_NOTHING = "nothing was decided"


class NotInRegistry(ModelcdError):
    """The registry answered that what was asked for (a registered model, a version, an artifact) does not exist."""


def version_task(tags: Mapping[str, str]) -> str:
    """The task a version's tags declare; a version registered before tasks existed is a classifier, and an unknown task is
    refused with the known ones."""
    return require_task(tags.get(TASK, DEFAULT_TASK))


@dataclass(frozen=True)
class CandidateRef:
    """A registered model version, and its Dagster partition key NAME:VERSION."""

    name: str
    version: str

    @property
    def key(self) -> str:
        return f"{self.name}:{self.version}"

    @property
    def uri(self) -> str:
        return f"models:/{self.name}/{self.version}"

    @classmethod
    def parse(cls, key: str) -> "CandidateRef":
        name, sep, version = key.rpartition(":")
        if not sep or not name or not version.isdigit():
            raise ModelcdError(f"{key!r} is not a candidate key; expected NAME:VERSION, e.g. ticket-intent:3")
        return cls(name, version)

    @classmethod
    def from_uri(cls, uri: str) -> "CandidateRef":
        if not uri.startswith("models:/"):
            raise ModelcdError(f"{uri!r} is not a registry reference; expected models:/NAME/VERSION")
        name, sep, version = uri[len("models:/") :].rpartition("/")
        if not sep or not version.isdigit():
            raise ModelcdError(f"{uri!r} is not a registry reference; expected models:/NAME/VERSION")
        return cls(name, version)


def masked_uri(uri: str) -> str:
    """uri with its password, if any, shown as ***."""
    parts = urlsplit(uri)
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1))) if parts.password else uri


def masked_text(text: object, uri: str) -> str:
    """An error's text with uri's password, if any, shown as *** (MLflow's HTTP errors quote the URL they called)."""
    password = urlsplit(uri).password
    return str(text).replace(f":{password}@", ":***@") if password else str(text)


class Registry:
    """A thin client over one MLflow tracking/registry URI."""

    def __init__(self, tracking_uri: str, artifact_location: str, page_size: int = 100, keys: Keys | None = None):
        self.tracking_uri = tracking_uri
        # The signing key pair: registering signs with the private half, every fetch verifies with the public half.
        self.keys = keys if keys is not None else Keys.from_env()
        self.artifact_location = artifact_location
        # Searches return at most one page (100 registered models by default); every listing here reads all pages.
        self.page_size = page_size
        self.client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)

    @property
    def shown_uri(self) -> str:
        """The tracking URI as messages show it: a database password is masked."""
        return masked_uri(self.tracking_uri)

    @contextlib.contextmanager
    def _asking(self, what: str, then: str = DECIDED_NOTHING, keep: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
        """The one translator of registry errors, around every call to the registry: only the registry saying that something
        does not exist is NotInRegistry; any other MLflow error, and any network or database error, is RegistryUnavailable
        naming what was asked (`could not WHAT from URI: ...; THEN, retry when the registry answers`), never an answer.
        Exceptions of the types in keep pass unchanged."""
        try:
            yield
        except keep:
            raise
        except MlflowException as e:
            detail = masked_text(e.message, self.tracking_uri)
            if e.error_code == "RESOURCE_DOES_NOT_EXIST":
                raise NotInRegistry(f"could not {what} from {self.shown_uri}: {detail}") from e
            raise RegistryUnavailable(f"could not {what} from {self.shown_uri}: {detail}; {then}, retry when the registry answers") from e
        except Exception as e:  # a network or database error is not an answer
            raise RegistryUnavailable(
                f"could not {what} from {self.shown_uri}: {type(e).__name__}: {masked_text(e, self.tracking_uri)}; "
                f"{then}, retry when the registry answers"
            ) from e

    def _all_pages(self, search, **kwargs) -> list:
        """Every result of an MLflow search, page by page."""
        found, token = [], None
        while True:
            page = search(max_results=self.page_size, page_token=token, **kwargs)
            found.extend(page)
            token = page.token
            if not token:
                return found

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Registry":
        """The registry MLFLOW_TRACKING_URI and MODELCD_MLFLOW_ARTIFACTS name (see lib/operations/settings.py for the defaults)."""
        env = os.environ if environ is None else environ
        return cls(env["MLFLOW_TRACKING_URI"], env["MODELCD_MLFLOW_ARTIFACTS"], keys=Keys.from_env(env))

    def _experiment_id(self) -> str:
        with self._asking(f"read the experiment {EXPERIMENT!r}", then="nothing was registered"):
            exp = self.client.get_experiment_by_name(EXPERIMENT)
        if exp is not None:
            return exp.experiment_id
        location = self._artifact_uri()
        with self._asking(f"create the experiment {EXPERIMENT!r}", then="nothing was registered"):
            return self.client.create_experiment(EXPERIMENT, artifact_location=location)

    def _artifact_uri(self) -> str | None:
        """Where registrations store files: a local folder (the embedded default), a URI as given (mlflow-artifacts:/, s3://),
        or, when empty, the tracking server's own default (mlflow-artifacts:/ under `mlflow server --serve-artifacts`)."""
        location = self.artifact_location
        if not location:
            if not self.tracking_uri.startswith(("http://", "https://")):
                raise ModelcdError(
                    f"MODELCD_MLFLOW_ARTIFACTS is empty but the registry at {self.shown_uri} is not a tracking server that "
                    "stores artifacts itself; set it to a folder or an artifact URI"
                )
            return None
        if "://" in location or location.startswith("mlflow-artifacts:"):
            return location
        Path(location).mkdir(parents=True, exist_ok=True)
        return Path(location).resolve().as_uri()

    def _ensure_registered(self, name: str, role: str) -> None:
        try:
            with self._asking(f"read registered model {name!r}", then="nothing was registered"):
                rm = self.client.get_registered_model(name)
        except NotInRegistry:  # only the registry saying so means "not registered yet"
            with self._asking(f"create registered model {name!r}", then="nothing was registered"):
                self.client.create_registered_model(name, tags={ROLE: role})
            return
        if rm.tags.get(ROLE) != role:
            raise ModelcdError(
                f"registered model {name!r} is a {rm.tags.get(ROLE, 'non-modelcd')} model, not a {role}; pick another --name"
            )

    def register(
        self,
        folder: Path,
        name: str,
        *,
        role: str = "candidate",
        base: str | None = None,
        tags: dict[str, str] | None = None,
        limits: SafetyLimits = SafetyLimits(),
        task: str | None = None,
    ) -> CandidateRef:
        """Upload folder as a new version of name, with a sha256 manifest of its files; unsafe artifacts are refused first.

        task: what kind of model it is; a base or full model declares it (default: what its config's architecture says),
        an adapter carries its base's."""
        folder = Path(folder)
        info = inspect_artifact(folder)
        findings = scan_artifact(folder, limits)
        if findings:
            more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
            raise BadCandidate(f"refusing to register {folder}: {findings[0]}{more}")
        kind = "base" if role == "base" else info.kind
        version_tags = {KIND: kind, **(tags or {})}
        if info.kind == ADAPTER and role != "base":
            base_uri = base or info.declared_base
            if not base_uri or not str(base_uri).startswith("models:/"):
                raise BadCandidate(
                    f"adapter in {folder} declares base {info.declared_base!r}, which is not a registry reference; "
                    "pass --base models:/NAME/VERSION of a registered base model"
                )
            base_ref = CandidateRef.from_uri(base_uri)
            self.version(base_ref)  # raises when the base is not registered
            version_tags[BASE] = base_ref.uri
            base_task = self.task(base_ref)
            for claimed, source in ((task, "--task"), (task_of_adapter(folder), "its adapter_config.json task_type")):
                if claimed is not None and require_task(claimed) != base_task:
                    raise BadCandidate(
                        f"the adapter in {folder} is a {claimed} adapter by {source}, but its base {base_ref.uri} is a {base_task} "
                        f"model; register it against a {claimed} base"
                    )
            version_tags[TASK] = base_task
            refuse_unlisted_files(folder, base_task, lambda dst: self.fetch(base_ref, dst), limits.allow)
        else:
            version_tags[TASK] = require_task(task) if task else task_of_folder(folder)
        manifest = folder_manifest(folder)
        version_tags[CONTENT] = manifest_hash(manifest)
        private_key = self.keys.require_private()
        self._ensure_registered(name, role)
        experiment = self._experiment_id()
        with self._asking(f"start a registration run for {name!r}", then="nothing was registered"):
            run = self.client.create_run(experiment, run_name=f"register {name}", tags={"modelcd.registered_model": name})
        with tempfile.TemporaryDirectory() as tmp:
            # Signed before upload: the signature covers every file's sha256 and is verified at every fetch and load.
            signature = sign_folder(folder, private_key, Path(tmp) / SIGNATURE_FILE)
            with self._asking(f"upload the files of a new version of {name!r}", then="no version was registered"):
                try:
                    self.client.log_artifact(run.info.run_id, str(signature))
                    self.client.log_artifacts(run.info.run_id, str(folder), artifact_path="model")
                    self.client.log_dict(run.info.run_id, manifest, MANIFEST_FILE)
                    self.client.set_terminated(run.info.run_id)
                except Exception:
                    with contextlib.suppress(Exception):  # the upload's own error is the one to report
                        self.client.set_terminated(run.info.run_id, status="FAILED")
                    raise
        with self._asking(f"create a version of {name!r}", then="no version was registered"):
            mv = self.client.create_model_version(name, source=f"{run.info.artifact_uri}/model", run_id=run.info.run_id, tags=version_tags)
        return CandidateRef(name, str(mv.version))

    def version(self, ref: CandidateRef):
        """The MLflow ModelVersion, or a ModelcdError naming what is missing."""
        try:
            with self._asking(f"read {ref.uri}"):
                return self.client.get_model_version(ref.name, ref.version)
        except NotInRegistry as e:  # only the registry saying so means "not in the registry"
            raise NotInRegistry(
                f"{ref.uri} is not in the registry at {self.shown_uri}; check the name and version with 'modelcd status'"
            ) from e

    def fetch(self, ref: CandidateRef, dst: Path) -> Path:
        """Download a version's files into dst, verified against their signature before anything in them is read."""
        mv = self.version(ref)
        dst = Path(dst)
        if dst.exists():
            shutil.rmtree(dst)
        dst.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dst.parent) as tmp:
            got = Path(self._download(mv.source, Path(tmp) / "files"))
            self._verify(ref, mv, got, Path(tmp) / "signature")
            shutil.move(str(got), dst)
        return dst

    def _download(self, uri: str, dst: Path) -> str:
        dst.mkdir(parents=True, exist_ok=True)
        try:
            with self._asking(f"download {uri}", keep=(FileNotFoundError,)):
                return mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(dst), tracking_uri=self.tracking_uri)
        except NotInRegistry as e:
            raise FileNotFoundError(uri) from e

    def _stored(self, mv, path: str) -> bool:
        """Whether the version's registration run holds an artifact at path; a listing that fails is not an answer."""
        folder = path.rpartition("/")[0] or None
        if not mv.run_id:  # a version created without a run holds no artifacts of its own
            return False
        with self._asking(f"list the artifacts of models:/{mv.name}/{mv.version}"):
            return any(f.path == path for f in self.client.list_artifacts(mv.run_id, folder))

    def _run_root(self, mv) -> str:
        """The registration run's artifact root: the version's source is its `model` folder."""
        source = str(mv.source)
        if not source.endswith("/model"):
            raise BadCandidate(
                f"models:/{mv.name}/{mv.version} was not registered by modelcd (its source {source} is not a registration's model folder); "
                "register it with 'modelcd register'"
            )
        return source[: -len("/model")]

    def _verify(self, ref: CandidateRef, mv, folder: Path, tmp: Path) -> str:
        """Verify folder against the version's registered signature, then the content tag against the signed files; their sha256."""
        public_key = self.keys.require_public()
        root = self._run_root(mv)
        # Absent, verify_folder says so.
        signature = Path(self._download(f"{root}/{SIGNATURE_FILE}", tmp)) if self._stored(mv, SIGNATURE_FILE) else tmp / SIGNATURE_FILE
        verify_folder(folder, public_key, signature, ref.uri)
        actual = manifest_hash(folder_manifest(folder))
        if mv.tags.get(CONTENT) != actual:
            raise BadCandidate(
                f"{ref.uri}: its tag {CONTENT} ({str(mv.tags.get(CONTENT))[:12]}) was changed after registration: the signed files hash to "
                f"{actual[:12]}; refusing it. Tags are not trusted over signed files: restore the tag or re-register the artifact"
            )
        return actual

    def verify_local(self, ref: CandidateRef, folder: Path) -> str:
        """The sha256 of a fetched copy of ref's files, once verified against the signature the registry holds for ref now.

        A model deleted and re-created restarts its version numbers: the new version's signature does not cover the old
        copy, so the old copy (and any verdict about it) is refused.
        """
        mv = self.version(ref)
        with tempfile.TemporaryDirectory() as tmp:
            return self._verify(ref, mv, Path(folder), Path(tmp))

    def put_attestation(self, ref: CandidateRef, envelope: dict) -> None:
        """Store a version's signed verdict with it, as an artifact of its registration run."""
        mv = self.version(ref)
        with self._asking(f"store the attestation of {ref.uri}", then="no attestation was stored"):
            self.client.log_dict(mv.run_id, envelope, f"{ATTESTATION_DIR}/{ref.name}-{ref.version}.intoto.json")

    def attestation(self, ref: CandidateRef) -> dict | None:
        """A version's signed verdict as stored with it; None when it has none (never promoted)."""
        mv = self.version(ref)
        path = f"{ATTESTATION_DIR}/{ref.name}-{ref.version}.intoto.json"
        root = self._run_root(mv)
        if not self._stored(mv, path):
            return None
        with tempfile.TemporaryDirectory() as tmp:
            got = self._download(f"{root}/{path}", Path(tmp))
            try:
                return json.loads(Path(got).read_text())
            except (OSError, ValueError) as e:
                raise BadCandidate(f"the attestation stored with {ref.uri} is not readable JSON ({e}); refusing it") from e

    def task(self, ref: CandidateRef) -> str:
        """What kind of model a version is, by its modelcd.task tag (see version_task)."""
        return version_task(self.tags(ref))

    def tags(self, ref: CandidateRef) -> dict[str, str]:
        return dict(self.version(ref).tags)

    def set_tags(self, ref: CandidateRef, tags: dict[str, str]) -> None:
        for k, v in tags.items():
            with self._asking(f"set the tag {k} on {ref.uri}", then="the tag may not be set"):
                self.client.set_model_version_tag(ref.name, ref.version, k, v)

    def calibration_of(self, name: str) -> str | None:
        """The sha256 of the registered model's current calibration set; None when none was registered for it."""
        with self._asking(f"read the calibration set of {name!r}"):
            return self.client.get_registered_model(name).tags.get(CALIBRATION)

    def set_calibration(self, name: str, sha256: str) -> None:
        with self._asking(f"set the calibration set of {name!r}", then="the set was not recorded"):
            self.client.set_registered_model_tag(name, CALIBRATION, sha256)

    def rollout_envelope(self, name: str) -> dict | None:
        """The signed rollout state stored on a registered model, unverified; None when it has none."""
        with self._asking(f"read the rollout state of {name!r}"):
            raw = self.client.get_registered_model(name).tags.get(ROLLOUT)
        if raw is None:
            return None
        try:
            envelope = json.loads(raw)
        except ValueError as e:
            raise BadCandidate(f"the rollout state stored on {name!r} is not JSON ({e}); refusing it") from e
        if not isinstance(envelope, dict):
            raise BadCandidate(f"the rollout state stored on {name!r} is not a signed envelope; refusing it")
        return envelope

    def put_rollout_envelope(self, name: str, envelope: dict) -> None:
        with self._asking(f"store the rollout state of {name!r}", then="the rollout did not move"):
            self.client.set_registered_model_tag(name, ROLLOUT, json.dumps(envelope, sort_keys=True, separators=(",", ":")))

    def register_revision(self, production: CandidateRef, calibration_sha256: str) -> CandidateRef:
        """A new version of production's model with production's registered files (no copy, no retraining), to be quantized
        under another calibration set and gated against production like any other version."""
        mv = self.version(production)
        tags = dict(mv.tags)
        keep = {k: tags[k] for k in (KIND, BASE, CONTENT) if k in tags}
        revision = {
            **keep,
            REVISION_OF: production.version,
            WEIGHTS_VERSION: tags.get(WEIGHTS_VERSION, production.version),
            CALIBRATION: calibration_sha256,
        }
        with self._asking(f"create a calibration revision of {production.uri}", then="no revision was registered"):
            new = self.client.create_model_version(
                production.name,
                source=mv.source,
                run_id=mv.run_id,
                tags=revision,
                description=f"calibration revision of version {production.version} (set {calibration_sha256[:12]})",
            )
        return CandidateRef(production.name, str(new.version))

    def revisions_of(self, production: CandidateRef) -> dict[str, CandidateRef]:
        """Calibration revisions registered for a version, by calibration sha256."""
        mvs = self._versions_of(production.name)
        return {
            v.tags[CALIBRATION]: CandidateRef(production.name, str(v.version))
            for v in mvs
            if v.tags.get(REVISION_OF) == production.version and CALIBRATION in v.tags
        }

    def production(self, name: str) -> CandidateRef | None:
        """The version the production alias points to; None only when the registry answers that there is none."""
        try:
            with self._asking(f"read the production alias of {name!r}"):
                aliases = self.client.get_registered_model(name).aliases
        except NotInRegistry:  # the model itself is not registered: no alias either
            return None
        version = aliases.get(PRODUCTION)
        return CandidateRef(name, str(version)) if version is not None else None

    def move_production(self, ref: CandidateRef, reason: dict, expected: CandidateRef | None, lock: AliasLock) -> CandidateRef | None:
        """Point the production alias at ref only if it still points at expected (compare-and-set), recording why on ref.

        The compare and the set happen under lock (lib/release/alias_lock.py), which every writer of the alias holds; the
        Dagster pool `modelcd_promotion` alone does not keep two moves apart. After the set the alias is read back: a move
        that did not take, or whose recorded previous production no longer precedes it, raises AliasMoveLost, and a version
        the alias did not reach keeps no promotion record. Returns the previous version.
        """
        with lock.held(ref.name):
            current = self.production(ref.name)
            if current != expected:
                raise Superseded(
                    f"production of {ref.name} moved from {expected.version if expected else 'nothing'} to "
                    f"{current.version if current else 'nothing'} while {ref.uri} was gated; re-gate it against "
                    f"{current.version if current else 'nothing'} with 'modelcd gate {ref.name} {ref.version}'"
                )
            self.version(ref)
            if current == ref:  # already production (re-gated, e.g. after a crash past the alias move): the record of that move stands
                return current
            failpoint("between_compare_and_set")
            record = {PROMOTION: json.dumps(reason, sort_keys=True), PREVIOUS_PRODUCTION: current.version if current else ""}
            self.set_tags(ref, record)
            failpoint("after_tags")
            try:
                with self._asking(f"move the production alias of {ref.name} to {ref.version}", then="production was not moved"):
                    self.client.set_registered_model_alias(ref.name, PRODUCTION, ref.version)
            except Exception:
                self._forget_move(ref, record)
                raise
            failpoint("after_alias")
            self._read_back(ref, record, lock)
        return current

    def _read_back(self, ref: CandidateRef, record: dict[str, str], lock: AliasLock) -> None:
        """Raise AliasMoveLost unless the alias is ref and ref's recorded previous production is the one the move compared."""
        now = self.production(ref.name)
        previous = self.tags(ref).get(PREVIOUS_PRODUCTION)
        if now == ref and previous == record[PREVIOUS_PRODUCTION]:
            return
        if now != ref:
            self._forget_move(ref, record)
        raise AliasMoveLost(
            f"the production alias of {ref.name} was set to {ref.version} under {lock.shown}, but read back it points at "
            f"{now.version if now else 'nothing'} and {ref.uri} records {previous or 'nothing'} as its previous production where the "
            f"move compared {record[PREVIOUS_PRODUCTION] or 'nothing'}: another writer moved it without the lock. "
            f"{'The promotion record on ' + ref.uri + ' was removed. ' if now != ref else ''}"
            f"Check the chain with 'modelcd audit {ref.name}' before gating again"
        )

    def _forget_move(self, ref: CandidateRef, record: dict[str, str]) -> None:
        """Remove the tags a move wrote on ref, which the alias did not reach."""
        self.remove_tags(ref, record)

    def remove_tags(self, ref: CandidateRef, keys: Iterable[str]) -> None:
        for k in keys:
            with self._asking(
                f"remove the tag {k} from {ref.uri}", then=f"{ref.uri} may still carry it: check with 'modelcd audit {ref.name}'"
            ):
                self.client.delete_model_version_tag(ref.name, ref.version, k)

    def tags_by_version(self, name: str) -> dict[str, dict[str, str]]:
        """Every version of a registered model with its tags, from one paged listing."""
        return {str(v.version): dict(v.tags) for v in self._versions_of(name)}

    def versions(self, name: str) -> list[CandidateRef]:
        """All versions of a registered model, oldest first."""
        return sorted((CandidateRef(name, str(v.version)) for v in self._versions_of(name)), key=lambda r: int(r.version))

    def _versions_of(self, name: str) -> list:
        """Every MLflow ModelVersion of a registered model, all pages."""
        with self._asking(f"list the versions of {name!r}"):
            return self._all_pages(self.client.search_model_versions, filter_string=f"name='{name}'")

    def productions(self) -> dict[str, CandidateRef]:
        """Each candidate model that has a production version, with it; a registry that does not answer raises."""
        # candidate_models raises RegistryUnavailable itself: a listing that failed is not an answer of "no models".
        return {m: prod for m in self.candidate_models() if (prod := self.production(m)) is not None}

    def candidate_versions(self, names: Iterable[str] | None = None) -> dict[str, list[CandidateRef]]:
        """Every version of every candidate model (names, when the caller listed them already), oldest first per model: one paged
        listing of versions, after one of the models unless names were given, however many models there are."""
        names = set(self.candidate_models() if names is None else names)
        found: dict[str, list[CandidateRef]] = {name: [] for name in names}
        with self._asking("list the registered versions"):
            listing = self._all_pages(self.client.search_model_versions, filter_string=None)
        for v in listing:
            if v.name in names:
                found[v.name].append(CandidateRef(v.name, str(v.version)))
        return {name: sorted(refs, key=lambda r: int(r.version)) for name, refs in sorted(found.items())}

    def candidate_models_created(self) -> dict[str, int]:
        """Each candidate model's creation time (ms): a model deleted and re-created under its name gets a new one."""
        return {m.name: int(m.creation_timestamp or 0) for m in self._candidate_model_listing()}

    def require_candidate_model(self, name: str) -> None:
        """Raise, with what to do, unless name is a registered model whose versions are candidates."""
        if name not in self.candidate_models():
            raise ModelcdError(
                f"{name!r} is not a registered candidate model; run 'make demo' for the demo's ticket-intent, "
                f"or register versions with 'modelcd register PATH --name NAME' (registry: {self.shown_uri})"
            )

    def candidate_models(self) -> list[str]:
        """Names of registered models whose versions are candidates for production."""
        return sorted(m.name for m in self._candidate_model_listing())

    def _candidate_model_listing(self) -> list:
        """Every registered model tagged as a candidate, all pages; an error is RegistryUnavailable, never "no models"."""
        with self._asking("list the registered models"):  # a listing that failed is not an answer of "no models"
            return self._all_pages(self.client.search_registered_models, filter_string=f"tags.`{ROLE}` = 'candidate'")
