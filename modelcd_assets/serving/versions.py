"""The versions a server has loaded, which one serves by default, and how a version gets in; each task's pool says how
its artifact is opened and probed (serving/classifier/pool.py, serving/lm/pool.py).

A version is loaded off the request path, and only with a valid verdict over the bytes it would serve
(lib/release/servable.py: its registered files verified against the signature the registry holds for it, its signed
attestation, and the served files hashed against the attested digests); its files are scanned, its artifact is opened
from the very bytes that were hashed, and its outputs on the probe inputs are compared with those recorded at gating.
Only then is it published, by one reference assignment; a request takes its snapshot of that reference once, so it is
served entirely by one version. At most serving.max_loaded_versions stay loaded: the least recently used one that is not
the default goes first.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from modelcd_assets.lib.errors import ModelcdError, RegistryUnavailable
from modelcd_assets.lib.judging.policy import ServingPolicy
from modelcd_assets.lib.judging.safety import SafetyLimits, scan_artifact
from modelcd_assets.lib.release import servable
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import ROLLED_BACK, CandidateRef, Registry
from modelcd_assets.serving.consistency import Consistency, SwapRefused


class ServedVersion(Protocol):
    """What a request is served by, whatever the task: a registry version and the gated artifact of it that is loaded."""

    model: str
    version: str
    content_hash: str  # the registered version's files
    artifact_sha256: str  # the INT8 model (or base build) the gates judged, verified at load
    variant: str

    @property
    def adapter_label(self) -> str: ...


class UnknownVersion(ModelcdError):
    """A request or admin call named a version this server has not loaded."""


@dataclass(frozen=True)
class LoadReport:
    version: str
    content_hash: str
    artifact_sha256: str
    variant: str
    seconds: float
    consistency: Consistency
    evicted: tuple[str, ...] = ()
    steps: tuple[tuple[str, float], ...] = ()  # (step, seconds) in the order they ran

    def as_dict(self) -> dict:
        return {
            "version": self.version,
            "content_sha256": self.content_hash,
            "artifact_sha256": self.artifact_sha256,
            "variant": self.variant,
            "seconds": round(self.seconds, 4),
            "steps": {k: round(v, 4) for k, v in self.steps},
            "consistency": self.consistency.as_dict(),
            "evicted": list(self.evicted),
        }


class Steps:
    """Seconds spent in each step of a load, for the admin API's report and the swap bench."""

    def __init__(self):
        self.start = self._last = time.perf_counter()
        self.done: list[tuple[str, float]] = []

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.done.append((name, now - self._last))
        self._last = now


def scan(folder: Path, what: str, limits: SafetyLimits) -> None:
    """Refuse (SwapRefused) a version whose registered files the safety scan finds anything in."""
    findings = scan_artifact(folder, limits)
    if findings:
        raise SwapRefused(f"{what}: {findings[0]}; refusing to load it")


class VersionPool(ABC):
    """Loaded versions of one registered model, keyed by registry version; a subclass serves one task's versions."""

    task: str

    def __init__(
        self,
        model: str,
        registry: Registry,
        state_root: Path,
        policy: ServingPolicy,
        limits: SafetyLimits = SafetyLimits(),
        threads: int = 1,
    ):
        self.model, self.registry, self.state_root, self.policy, self.limits = model, registry, Path(state_root), policy, limits
        self.threads = threads  # ORT intra-op threads per model call
        self._loaded: OrderedDict[str, ServedVersion] = OrderedDict()  # least recently used first
        self.reports: dict[str, LoadReport] = {}  # the last load of each loaded version
        self._withdrawn: set[str] = set()  # versions production was rolled back from: never answered from again
        self._active: ServedVersion | None = None
        self._load_lock = threading.Lock()
        self._offline_only: dict[str, bool] = {}  # versions whose verdict is a rollout's first: never the default

    @property
    def active(self) -> ServedVersion | None:
        return self._active

    @property
    def withdrawn(self) -> frozenset[str]:
        """Versions production was rolled back from, as last read from the registry: never answered from again."""
        return frozenset(self._withdrawn)

    def loaded(self) -> list[ServedVersion]:
        return sorted(self._loaded.values(), key=lambda s: int(s.version))

    def resolve(self, version: str | None) -> ServedVersion:
        """The version a request asked for, or the default; one snapshot per request."""
        if version is None:
            served = self._active
            if served is None:
                raise UnknownVersion(f"no version of {self.model} is being served yet; the server is not ready")
            return served
        served = self._loaded.get(str(version))
        if served is None or served.version in self._withdrawn:
            raise UnknownVersion(f"version {version} of {self.model} is not served here")
        try:
            self._loaded.move_to_end(served.version)
        except KeyError:  # unloaded meanwhile; this request still has its snapshot
            pass
        return served

    def _gated(self, ref: CandidateRef) -> tuple[CandidateRecord, dict]:
        what = ref.uri
        rerun = f"run 'modelcd gate {ref.name} {ref.version}'"
        try:
            record = CandidateRecord.of(self.state_root, ref)
            gated = record.quantization()
        except FileNotFoundError as e:
            raise servable.NotServable(
                f"{servable.NO_VERDICT} for {what}: it has no gated build in {self.state_root}; {rerun} first"
            ) from e
        if record.task != self.task:
            raise SwapRefused(
                f"{what} is a {record.task} model, and this server serves {self.task} models; serve it with a server of its own "
                f"('modelcd serve {ref.name}' picks the server by the task its production records)"
            )
        if "artifact_sha256" not in gated or "probe" not in gated:
            raise SwapRefused(
                f"{what} was gated by an older modelcd that recorded neither the served artifact's hash nor its probe outputs; {rerun}"
            )
        return record, gated

    def load(self, version: str) -> LoadReport:
        """Load, verify and probe a version; it serves nothing until activate()."""
        with self._load_lock:
            step = Steps()
            ref = CandidateRef(self.model, str(version))
            record, gated = self._gated(ref)
            step("records")
            served, consistency = self._open(ref, record, gated, step)
            previous = self._loaded.get(ref.version)
            self._loaded[ref.version] = served
            self._loaded.move_to_end(ref.version)
            if previous is not None:  # loaded again: the fresh copy replaces the old one everywhere, which then goes
                if self._active is previous:
                    self._active = served
                self._forget(previous)
            evicted = self._evict(keep=ref.version)
            report = LoadReport(
                ref.version,
                served.content_hash,
                served.artifact_sha256,
                served.variant,
                time.perf_counter() - step.start,
                consistency,
                evicted,
                tuple(step.done),
            )
            self.reports[ref.version] = report
            return report

    def _check(self, ref: CandidateRef, int8_sha256: str) -> servable.Servable:
        try:
            checked = servable.check(self.registry, self.state_root, ref, int8_sha256=int8_sha256)
        except RegistryUnavailable as e:
            raise SwapRefused(f"{ref.uri} could not be checked: {e}") from e
        self._withdrawn.discard(ref.version)
        self._offline_only[ref.version] = checked.verdict.offline_only
        return checked

    @abstractmethod
    def _open(self, ref: CandidateRef, record: CandidateRecord, gated: dict, step: Steps) -> tuple[ServedVersion, Consistency]:
        """The version's served artifact, verified against its verdict (_check), opened from the bytes that were hashed, and probed."""

    def refresh_withdrawn(self) -> set[str]:
        """Ask the registry which loaded versions production was rolled back from; they are answered from no more."""
        for version in list(self._loaded):
            if ROLLED_BACK in self.registry.tags(CandidateRef(self.model, version)):
                self._withdrawn.add(version)
        return set(self._withdrawn)

    def _evict(self, keep: str) -> tuple[str, ...]:
        """Unload least recently used versions beyond the policy's limit; the default one and the one just loaded stay."""
        evicted = []
        for version in list(self._loaded):
            if len(self._loaded) <= self.policy.max_loaded_versions:
                break
            if version == keep or (self._active is not None and self._active.version == version):
                continue
            self._forget(self._loaded.pop(version))
            self.reports.pop(version, None)
            evicted.append(version)
        return tuple(evicted)

    def _forget(self, served: ServedVersion) -> None:
        """A version no longer loaded: its session goes with the last request holding it."""

    def activate(self, version: str) -> ServedVersion:
        """Make a loaded version the default; one reference assignment, so no request sees a mix. A version whose verdict is
        a rollout's first (its offline gates only) may take a rollout's share, never the default's place."""
        served = self.resolve(str(version))
        if self._offline_only.get(served.version, True):
            raise SwapRefused(
                f"version {served.version} of {self.model} passed its offline gates only: it may take a rollout's shadow or canary "
                "share, and becomes the default only once its rollout promotes it (its verdict is then re-signed)"
            )
        self._active = served
        return served

    def unload(self, version: str) -> None:
        """Forget a loaded version; the default version cannot be unloaded."""
        with self._load_lock:
            served = self.resolve(str(version))
            if self._active is not None and self._active.version == served.version:
                raise ModelcdError(
                    f"version {version} of {self.model} is the default being served; activate another version before unloading it"
                )
            self._forget(self._loaded.pop(served.version))
            self.reports.pop(served.version, None)
