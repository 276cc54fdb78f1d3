"""An isolated copy of one model's production: its own state folder, MLflow registry and Dagster instance.

The user's registry is only read (production's files, its base's, the policy and the data splits); everything the
fault classes do, promotions included, happens in the copy, so the user's production alias never moves.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

import dagster as dg
import yaml

from modelcd_assets import launch
from modelcd_assets.faults.builders import Candidate, Production, random_reinit, weights_file
from modelcd_assets.faults.outcomes import BAD_INPUT, ERROR, MANIFEST, PROMOTED, RUN_FAILED, SUPERSEDED, Outcome, blocked_by
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.hashing import folder_manifest, manifest_hash
from modelcd_assets.lib.judging.policy import policy_for, policy_path
from modelcd_assets.lib.operations.settings import apply_local_defaults, local_defaults
from modelcd_assets.lib.release.alias_lock import AliasLock
from modelcd_assets.lib.release.artifact import ADAPTER, inspect_artifact
from modelcd_assets.lib.release.registry import (
    BASE,
    CONTENT,
    EXPERIMENT,
    KIND,
    PROMOTION,
    SEMVER,
    SEMVER_DECLARED,
    TOKENIZER_CHANGE,
    CandidateRef,
    Registry,
    version_task,
)
from modelcd_assets.lib.release.signing import SIGNATURE_FILE, FilesChanged, Keys, init_keys, sign_folder
from modelcd_assets.lib.splits import split_path
from modelcd_assets.lib.tasks.names import DEFAULT_TASK
from modelcd_assets.resources.alias_lock import alias_lock_for

SANDBOX_REASON = {"fault_sandbox": "production restored after a fault class"}
# Gate statuses that are no failure: a pass, nothing to judge, or never reached because an earlier gate blocked.
_PASSING = ("pass", "no golden cases declared", "not run")


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """os.environ with env applied, restored afterwards: Dagster's EnvVar resources resolve when a run starts."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _limits(env: Mapping[str, str], name: str):
    """The safety limits of name's policy, as `modelcd register` applies them."""
    return policy_for(Path(env["MODELCD_POLICY_DIR"]), name).safety.limits()


def _register_as_version(reg: Registry, folder: Path, name: str, version: str, **kw) -> CandidateRef:
    """Register folder so that it is `version` of name: earlier numbers are filled with versions of the same files.

    An adapter names its base as models:/NAME/VERSION; the copy must answer to the same reference.
    """
    ref = reg.register(folder, name, **kw)
    first = reg.version(ref)
    while int(ref.version) < int(version):
        mv = reg.client.create_model_version(name, source=first.source, run_id=first.run_id, tags=first.tags)
        ref = CandidateRef(name, str(mv.version))
    if ref.version != str(version):
        raise ModelcdError(f"the sandbox registry already holds {ref.uri}; use a fresh sandbox folder")
    return ref


@dataclass
class Sandbox:
    """The isolated copy; `production` is the sandbox's production version, judged there by every gate first."""

    name: str
    root: Path
    env: dict[str, str]
    registry: Registry
    instance: dg.DagsterInstance
    prod: Production
    production: CandidateRef
    progress: bool = False
    task: str = DEFAULT_TASK
    # How long each step of a live class's rollout lasts (faults/live_faults.sandbox_rollout); None: its default.
    live_step_seconds: float | None = None
    _blocked: CandidateRef | None = field(default=None, repr=False)

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def home(self) -> Path:
        """The sandbox's state folder: candidate records, builds, attestations."""
        return Path(self.env["MODELCD_HOME"])

    @property
    def data(self) -> Path:
        return Path(self.env["MODELCD_DATA"])

    @property
    def policy_path(self) -> Path:
        return policy_path(Path(self.env["MODELCD_POLICY_DIR"]), self.name)

    @property
    def alias_lock(self) -> AliasLock:
        """The lock the sandbox's own moves of its alias hold, as its gated runs' do."""
        return alias_lock_for(self.instance, self.home)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        with environment(self.env):
            yield

    def register(self, cand: Candidate, name: str | None = None) -> CandidateRef:
        """`modelcd register`, into the sandbox: the safety scan with the model's policy limits, then the upload (as name, default the
        model's)."""
        name = name or self.name
        return self.registry.register(cand.folder, name, base=cand.base, tags=dict(cand.tags), limits=_limits(self.env, name))

    def cli(self, argv: list[str], **env: str) -> tuple[int, str]:
        """The `modelcd` command run in this process on the sandbox's environment (with env overriding it): exit code and stderr."""
        from modelcd_assets.cli import main

        err = io.StringIO()
        with environment({**self.env, **env}), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(argv)
        return code, err.getvalue()

    def blocked_version(self) -> CandidateRef:
        """A version gated here and blocked, with its INT8 model built and no verdict: production's weights redrawn at random, which the
        accuracy or the INT8 fidelity gate blocks once quantized_model has run. Registered and gated once per sandbox."""
        if self._blocked is None:
            ref = self.register(random_reinit(self.prod, self.work / "blocked-version"))
            run = self.gate(ref)
            if run.outcome != launch.BLOCKED:
                raise ModelcdError(
                    f"{ref.uri}, production's weights redrawn at random, was not blocked in the sandbox ({run.outcome}: {run.error}); "
                    "a class that needs a blocked version cannot be set up"
                )
            self._blocked = ref
        return self._blocked

    def upload_raw(self, cand: Candidate) -> CandidateRef:
        """What a tool writing straight to MLflow with the signing key could do: upload signed files and tag a matching manifest,
        no scan (without the key, the fetch refuses it as unsigned before any gate; with it, artifact_is_safe must)."""
        client = self.registry.client
        info = inspect_artifact(cand.folder)
        run = client.create_run(client.get_experiment_by_name(EXPERIMENT).experiment_id, run_name=f"raw upload {self.name}")
        with tempfile.TemporaryDirectory() as tmp:
            client.log_artifact(
                run.info.run_id, str(sign_folder(cand.folder, self.registry.keys.require_private(), Path(tmp) / SIGNATURE_FILE))
            )
        client.log_artifacts(run.info.run_id, str(cand.folder), artifact_path="model")
        client.set_terminated(run.info.run_id)
        tags = {KIND: info.kind, CONTENT: manifest_hash(folder_manifest(cand.folder)), **cand.tags}
        if info.kind == ADAPTER:
            tags[BASE] = cand.base or info.declared_base or self.prod.base_uri
        mv = client.create_model_version(self.name, source=f"{run.info.artifact_uri}/model", run_id=run.info.run_id, tags=tags)
        return CandidateRef(self.name, str(mv.version))

    def stored_files(self, ref: CandidateRef) -> Path:
        """Where the registry keeps a version's files (the sandbox's artifact store is a local folder)."""
        source = urlparse(self.registry.version(ref).source)
        if source.scheme != "file":
            raise ModelcdError(f"{ref.uri} is stored at {source.geturl()}, not in a local folder")
        return Path(unquote(source.path))

    def tamper(self, ref: CandidateRef) -> None:
        """Flip one byte of the stored weights after registration, as a bad disk or an overwrite would."""
        path = weights_file(self.stored_files(ref))
        data = bytearray(path.read_bytes())
        data[-1] ^= 0x01
        path.write_bytes(bytes(data))

    def gate(self, ref: CandidateRef, traffic_sample: str = "traffic_current") -> launch.GateRun:
        """The gated job, as `modelcd gate` runs it, on the sandbox's instance and state."""
        with self.active():
            return launch.run_gate(ref, traffic_sample=traffic_sample, instance=self.instance, progress=self.progress)

    def restore_production(self) -> None:
        """Point the sandbox's alias back at its production, whatever a fault class made of it."""
        now = self.registry.production(self.name)
        if now != self.production:
            self.registry.move_production(self.production, SANDBOX_REASON, expected=now, lock=self.alias_lock)

    def judge(self, ref: CandidateRef, run: launch.GateRun, expected_gate: str | None = None) -> Outcome:
        """What happened to ref, from the run and from the registry itself: the alias and the promotion record."""
        now = self.registry.production(self.name)
        promoted = ref != self.production and (now == ref or PROMOTION in self.registry.tags(ref))
        if run.outcome == launch.PROMOTED or promoted:
            return Outcome(PROMOTED, detail=f"{ref.uri} {'is production' if now == ref else 'was promoted'}: {run.error}".rstrip(": "))
        if now != self.production:
            return Outcome(ERROR, detail=f"production moved to {now.uri if now else 'nothing'} during the run")
        if run.outcome == launch.BLOCKED:
            failed = [r.gate for r in run.rows if r.status not in _PASSING]
            return blocked_by(failed, expected_gate, run.error)
        if run.outcome == launch.SUPERSEDED:
            return Outcome(SUPERSEDED, detail=run.error)
        if run.outcome == launch.BAD_INPUT:
            changed = run.error_type is not None and issubclass(run.error_type, FilesChanged)
            return Outcome(MANIFEST if changed else BAD_INPUT, detail=run.error)
        return Outcome(RUN_FAILED, detail=run.error)

    @contextlib.contextmanager
    def calibration(self, texts: list[str]) -> Iterator[None]:
        """The sandbox's calibration split replaced by texts while the block runs."""
        path = split_path(self.data, "calibration")
        saved = path.read_bytes()
        path.write_text("".join(json.dumps({"text": t, "label": "unknown"}) + "\n" for t in texts))
        try:
            yield
        finally:
            path.write_bytes(saved)

    def policy(self, overrides: dict) -> contextlib.AbstractContextManager[None]:
        """The sandbox's policy for the model with sections overridden while the block runs."""

        def override(policy: dict) -> None:
            for section, values in overrides.items():
                policy[section] = {**(policy.get(section) or {}), **values}

        return self.policy_edited(override)

    @contextlib.contextmanager
    def policy_edited(self, edit: Callable[[dict], None]) -> Iterator[None]:
        """The sandbox's policy for the model as edit(policy) leaves it, while the block runs; restored afterwards."""
        path = self.policy_path
        saved = path.read_text() if path.is_file() else None
        policy = (yaml.safe_load(saved) if saved else None) or {}
        edit(policy)
        path.write_text(yaml.safe_dump(policy, sort_keys=False))
        try:
            yield
        finally:
            if saved is None:
                path.unlink()
            else:
                path.write_text(saved)


def _fetch_production(source: Registry, name: str, work: Path) -> tuple[CandidateRef, dict, Production, CandidateRef | None]:
    """The user's production version, its tags, its files (and its base's, for an adapter), verified against their manifests."""
    prod = source.production(name)
    if prod is None:
        raise ModelcdError(
            f"{name} has no production version in {source.shown_uri}; faults are derived from production ('make demo' first)"
        )
    tags = source.tags(prod)
    artifact = source.fetch(prod, work / "production")
    kind = inspect_artifact(artifact).kind
    if kind != ADAPTER:
        return prod, tags, Production(artifact, kind, work), None
    base_ref = CandidateRef.from_uri(tags[BASE])
    base_dir = source.fetch(base_ref, work / "base")
    return prod, tags, Production(artifact, kind, work, base_dir, base_ref.uri), base_ref


@contextlib.contextmanager
def open_sandbox(
    name: str, source_env: Mapping[str, str], root: Path, progress: bool = False, live_step_seconds: float | None = None
) -> Iterator[Sandbox]:
    """A sandbox under root holding a copy of name's production (and its base), gated there so it is the sandbox's production.
    live_step_seconds: how long each step of a live class's rollout lasts (None: faults/live_faults.sandbox_rollout's default)."""
    if live_step_seconds is not None and not live_step_seconds > 0:
        raise ModelcdError(f"a live class's rollout steps must last some time: live step seconds {live_step_seconds!r} is not above 0")
    root = Path(root)
    source = Registry.from_env(source_env)
    env = local_defaults(root / "home")
    apply_local_defaults(env)  # the folders and the instance's dagster.yaml
    init_keys(Keys.from_env(env))  # the sandbox signs and verifies with a key pair of its own, never the user's
    for split in Path(source_env["MODELCD_DATA"]).glob("*.jsonl"):
        shutil.copy2(split, Path(env["MODELCD_DATA"]) / split.name)
    policy = policy_path(Path(source_env["MODELCD_POLICY_DIR"]), name)
    if policy.is_file():
        shutil.copy2(policy, Path(env["MODELCD_POLICY_DIR"]) / policy.name)
    work = root / "work"
    work.mkdir(parents=True, exist_ok=True)
    user_prod, tags, prod, base_ref = _fetch_production(source, name, work)
    registry = Registry.from_env(env)
    if base_ref is not None:
        _register_as_version(registry, prod.base, base_ref.name, base_ref.version, role="base", limits=_limits(env, base_ref.name))
    carried = {k: v for k, v in ((SEMVER_DECLARED, tags.get(SEMVER)), (TOKENIZER_CHANGE, tags.get(TOKENIZER_CHANGE))) if v}
    with environment(env):
        instance = dg.DagsterInstance.get()
    try:
        ref = registry.register(prod.artifact, name, base=prod.base_uri, tags=carried, limits=_limits(env, name))
        sandbox = Sandbox(name, root, env, registry, instance, prod, ref, progress, version_task(tags), live_step_seconds)
        run = sandbox.gate(ref)
        if run.outcome != launch.PROMOTED:
            failing = "; ".join(f"{r.gate}: {r.reason or r.status}" for r in run.rows if r.status not in _PASSING) or run.error
            raise ModelcdError(
                f"production {user_prod.uri}, copied into the sandbox, does not pass its own gates there ({run.outcome}: {failing}); "
                "faults are judged against a production that does"
            )
        yield sandbox
    finally:
        instance.dispose()
