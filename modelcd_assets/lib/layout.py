"""The state folder's layout, defined once: every per-candidate file, and the folders beside them.

The state resource, the assets and their checks, the server, the fault sandbox and the benches ask this module where a
thing lives; none of them joins a file name by hand.

    <state>/candidates/NAME/VERSION/   CandidateFiles: the fetched artifact and the reports the gates judge
    <state>/candidates/NAME/variants/  the INT8 variant chosen per base and calibration set, shared by NAME's versions
    <state>/cache/KIND/                content-addressed work shared by every candidate (bases, builds, tokens)
    <state>/calibration/               calibration sets under their sha256
    <state>/calibration/from-traffic/  live texts a recalibrate trigger calibrates on (defs/sensors/trigger_sensor.py)
    <state>/attestations/NAME/         signed verdicts, VERSION.intoto.json
    <state>/traffic/NAME/              the sampled traffic and the live drift verdict (lib/operations/traffic_log.py)
    <state>/locks/                     the production aliases' flock files (lib/release/alias_lock.py)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

CANDIDATES_DIR = "candidates"
VARIANTS_DIR = "variants"
CACHE_DIR = "cache"
CALIBRATION_DIR = "calibration"
FROM_TRAFFIC_DIR = "from-traffic"
ATTESTATIONS_DIR = "attestations"
TRAFFIC_DIR = "traffic"
ROLLOUTS_DIR = "rollouts"
LOCKS_DIR = "locks"

ARTIFACT_DIR = "artifact"
RECORD_FILE = "candidate.json"
QUANTIZATION_FILE = "quantization.json"
HEALTH_FILE = "health.json"
CONTRACT_FILE = "contract.json"
EVALUATION_FILE = "evaluation.json"
CORRECTNESS_FILE = "evaluation_correct.npz"
DRIFT_FILE = "drift.json"
BENCHMARK_FILE = "benchmark.json"
# Every name a candidate folder holds: each is spelled out here and nowhere else (a test greps the package for it).
CANDIDATE_FILES = (
    ARTIFACT_DIR,
    RECORD_FILE,
    QUANTIZATION_FILE,
    HEALTH_FILE,
    CONTRACT_FILE,
    EVALUATION_FILE,
    CORRECTNESS_FILE,
    DRIFT_FILE,
    BENCHMARK_FILE,
)


class Versioned(Protocol):
    name: str
    version: str


@dataclass(frozen=True)
class CandidateFiles:
    """Everything modelcd keeps for one registered version."""

    dir: Path

    @property
    def artifact(self) -> Path:
        """The registered folder, fetched and verified against its signature."""
        return self.dir / ARTIFACT_DIR

    @property
    def record(self) -> Path:
        """lib/release/candidate.CandidateRecord: what the version is, where its build lives, what it is judged against."""
        return self.dir / RECORD_FILE

    @property
    def quantization(self) -> Path:
        """quantized_model's decision: the INT8 variant, its sha256 and its recorded probe outputs."""
        return self.dir / QUANTIZATION_FILE

    @property
    def health(self) -> Path:
        return self.dir / HEALTH_FILE

    @property
    def contract(self) -> Path:
        return self.dir / CONTRACT_FILE

    @property
    def evaluation(self) -> Path:
        return self.dir / EVALUATION_FILE

    @property
    def correctness(self) -> Path:
        """Per-example correctness of candidate and production on the evaluation split (the paired accuracy test's input)."""
        return self.dir / CORRECTNESS_FILE

    @property
    def drift(self) -> Path:
        return self.dir / DRIFT_FILE

    @property
    def benchmark(self) -> Path:
        return self.dir / BENCHMARK_FILE


@dataclass(frozen=True)
class StateLayout:
    """Where things live under one state folder (MODELCD_HOME)."""

    root: Path

    def candidate(self, ref: Versioned) -> CandidateFiles:
        return CandidateFiles(Path(self.root) / CANDIDATES_DIR / ref.name / ref.version)

    def variant_decision(self, name: str, key: str) -> Path:
        """A registered model's INT8 variant choice for one base and calibration set (key), shared by its versions."""
        return Path(self.root) / CANDIDATES_DIR / name / VARIANTS_DIR / f"{key}.json"

    def cache(self, kind: str) -> Path:
        return Path(self.root) / CACHE_DIR / kind

    def calibration(self) -> Path:
        return Path(self.root) / CALIBRATION_DIR

    def calibration_from_traffic(self, model: str, stamp: int) -> Path:
        """A recalibrate trigger's source: model's sampled live texts at stamp (seconds), as JSON lines."""
        return Path(self.root) / CALIBRATION_DIR / FROM_TRAFFIC_DIR / f"{model}-{stamp}.jsonl"

    def attestation(self, model: str, version: str) -> Path:
        """The state folder's copy of a version's signed verdict (the registry keeps the other, with the version)."""
        return Path(self.root) / ATTESTATIONS_DIR / model / f"{version}.intoto.json"

    def traffic(self, model: str) -> Path:
        return Path(self.root) / TRAFFIC_DIR / model

    def rollout(self, model: str, version: str) -> Path:
        """What each step of a version's rollout found on live traffic (lib/release/rollout.RolloutHistory)."""
        return Path(self.root) / ROLLOUTS_DIR / model / f"{version}.json"

    def locks(self) -> Path:
        """Lock files every writer on this machine and state folder shares (the production aliases')."""
        return Path(self.root) / LOCKS_DIR
