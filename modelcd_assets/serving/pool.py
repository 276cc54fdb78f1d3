"""The versions a server has loaded, which one serves by default, and how a version gets in.

A version is loaded off the request path: its files are re-verified against the registry's
manifest and scanned, its adapter is read and installed, and it is probed against the merged
ONNX model its gates judged. Only then is it published, by one reference assignment; a request
takes its snapshot of that reference once, so it is served entirely by one version.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from modelcd_assets.lib.artifact import ADAPTER
from modelcd_assets.lib.candidate import CandidateRecord
from modelcd_assets.lib.data import read_split
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.hashing import folder_manifest, manifest_hash
from modelcd_assets.lib.policy import ServingPolicy
from modelcd_assets.lib.registry import CONTENT, CandidateRef, Registry
from modelcd_assets.lib.safety import SafetyLimits, scan_artifact
from modelcd_assets.serving.consistency import Consistency, SwapRefused, compare, onnx_logits
from modelcd_assets.serving.engine import Engine, Served
from modelcd_assets.serving.lora import read_adapter


class UnknownVersion(ModelcdError):
    """A request or admin call named a version this server has not loaded."""


@dataclass(frozen=True)
class LoadReport:
    version: str
    content_hash: str
    seconds: float
    engine_loaded: bool  # True when this load had to read a base model from disk (a full reload)
    consistency: Consistency

    def as_dict(self) -> dict:
        return {"version": self.version, "content_sha256": self.content_hash, "seconds": round(self.seconds, 4),
                "full_reload": self.engine_loaded, "consistency": self.consistency.as_dict()}


def _verify(folder: Path, expected: str, what: str, limits: SafetyLimits) -> None:
    findings = scan_artifact(folder, limits)
    if findings:
        raise SwapRefused(f"{what}: {findings[0]}; refusing to load it")
    actual = manifest_hash(folder_manifest(folder))
    if actual != expected:
        raise SwapRefused(f"{what}: files in {folder} do not match the manifest registered for it (sha256 {actual[:12]} != {expected[:12]}); "
                          f"re-fetch it with 'modelcd gate'")


class ServingPool:
    """Loaded versions of one registered model, keyed by registry version."""

    def __init__(self, model: str, registry: Registry, state_root: Path, data_dir: Path, policy: ServingPolicy,
                 limits: SafetyLimits = SafetyLimits()):
        self.model, self.registry, self.state_root, self.policy, self.limits = model, registry, Path(state_root), policy, limits
        self.probe_texts = [ex.text for ex in read_split(Path(data_dir) / "evaluation.jsonl")[: policy.probe_examples]]
        self._engines: dict[str, Engine] = {}
        self._loaded: dict[str, Served] = {}
        self.reports: dict[str, LoadReport] = {}  # the last load of each loaded version
        self._references: dict[str, object] = {}
        # A registered version's content hash never changes; asking MLflow once per version keeps its
        # (pure-Python, GIL-holding) client off the loader thread on later swaps, where it slows requests.
        self._content_hash: dict[str, str] = {}
        self._active: Served | None = None
        self._load_lock = threading.Lock()

    @property
    def active(self) -> Served | None:
        return self._active

    def loaded(self) -> list[Served]:
        return sorted(self._loaded.values(), key=lambda s: int(s.version))

    def resolve(self, version: str | None) -> Served:
        """The version a request asked for, or the default; one snapshot per request."""
        if version is None:
            served = self._active
            if served is None:
                raise UnknownVersion(f"no version of {self.model} is being served yet; the server is not ready")
            return served
        served = self._loaded.get(str(version))
        if served is None:
            raise UnknownVersion(f"version {version} of {self.model} is not loaded here; loaded: {sorted(self._loaded, key=int) or 'none'}")
        return served

    def load(self, version: str) -> LoadReport:
        """Load, verify and probe a version; it serves nothing until activate()."""
        with self._load_lock:
            start = time.perf_counter()
            ref = CandidateRef(self.model, str(version))
            what = ref.uri
            if ref.version not in self._content_hash:
                self._content_hash[ref.version] = self.registry.tags(ref)[CONTENT]
            record_dir = self.state_root / "candidates" / ref.name / ref.version
            try:
                record = CandidateRecord.load(record_dir)
            except FileNotFoundError as e:
                raise SwapRefused(f"{what} has no gated build in {self.state_root}; run 'modelcd gate {ref.name} {ref.version}' first") from e
            if not record.build.onnx.is_file():
                raise SwapRefused(f"{what}: the merged ONNX model its gates judged is missing ({record.build.onnx}); run 'modelcd gate {ref.name} {ref.version}'")
            _verify(Path(record.artifact_dir), self._content_hash[ref.version], what, self.limits)
            engine_loaded = False
            if record.kind == ADAPTER:
                engine_key, engine_dir = record.base_hash, Path(record.base_dir)
            else:
                engine_key, engine_dir = record.content_hash, Path(record.artifact_dir)
            engine = self._engines.get(engine_key)
            if engine is None:
                if record.kind == ADAPTER:
                    _verify(engine_dir, record.base_hash, f"base {record.base_uri} of {what}", self.limits)
                engine = Engine(engine_dir, engine_key)
                engine_loaded = True
            adapter = None
            if record.kind == ADAPTER:
                try:
                    adapter = read_adapter(Path(record.artifact_dir), ref.key, record.content_hash)
                    engine.install(adapter)
                except ModelcdError as e:
                    raise SwapRefused(f"{what}: {e}") from e
            served = Served(self.model, ref.version, record.content_hash, engine, adapter)
            reference = self._references.get(record.build.key)
            if reference is None:
                reference = onnx_logits(record.build.onnx, engine.tokenizer, self.probe_texts, engine.max_length)
            consistency = compare(served.logits(self.probe_texts), reference, self.policy.max_abs_logit_diff,
                                  self.policy.min_top1_agreement, what)
            self._references[record.build.key] = reference
            self._engines[engine_key] = engine
            self._loaded[ref.version] = served
            report = LoadReport(ref.version, record.content_hash, time.perf_counter() - start, engine_loaded, consistency)
            self.reports[ref.version] = report
            return report

    def activate(self, version: str) -> Served:
        """Make a loaded version the default; one reference assignment, so no request sees a mix."""
        served = self.resolve(str(version))
        self._active = served
        return served

    def unload(self, version: str) -> None:
        """Forget a loaded version; the default version cannot be unloaded."""
        with self._load_lock:
            served = self.resolve(str(version))
            if self._active is not None and self._active.version == served.version:
                raise ModelcdError(f"version {version} of {self.model} is the default being served; activate another version before unloading it")
            del self._loaded[served.version]
            self.reports.pop(served.version, None)
            if not any(s.engine is served.engine for s in self._loaded.values()):
                self._engines.pop(served.engine.key, None)
