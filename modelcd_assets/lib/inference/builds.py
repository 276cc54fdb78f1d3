"""Content-addressed builds: the merged model, its ONNX exports and INT8 variants for one (base, candidate) pair."""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from modelcd_assets.lib.hashing import text_hash

# Bump when the way builds are made changes, so stale cached builds are not reused.
BUILD_RECIPE = "modelcd-build-5"


@dataclass(frozen=True)
class Build:
    dir: Path

    @classmethod
    def for_content(cls, builds_root: Path, base_hash: str | None, candidate_hash: str) -> "Build":
        return cls(Path(builds_root) / text_hash(BUILD_RECIPE, base_hash or "", candidate_hash)[:24])

    @property
    def key(self) -> str:
        return self.dir.name

    @property
    def merged(self) -> Path:
        return self.dir / "merged"

    @property
    def onnx(self) -> Path:
        return self.dir / "model.onnx"

    @property
    def optimized(self) -> Path:
        return self.dir / "optimized.onnx"

    def int8(self, artifact_id: str) -> Path:
        """An INT8 model by its artifact id (lib/inference/quantize.artifact_id: the variant, and for static INT8 its calibration set)."""
        return self.dir / f"int8_{artifact_id}.onnx"

    @property
    def fused_ops(self) -> Path:
        """The fused-operator counts of optimized.onnx."""
        return self.dir / "fused_ops.json"

    def quantization_report(self, calibration_sha256: str | None) -> Path:
        """Fidelity and speed of the INT8 variants made under one calibration set (None: a build made before sets were per version)."""
        return self.dir / (f"quantization_report_{calibration_sha256[:16]}.json" if calibration_sha256 else "quantization_report.json")

    def predictions(self, name: str, split_sha256: str | None = None) -> Path:
        """Class ids predicted by the FP32 export ("fp32") or an INT8 model (by artifact id): on the evaluation split
        (checked against the quantization report's hash), or on the split file whose sha256 is given."""
        return self.dir / (f"predictions_{name}.npy" if split_sha256 is None else f"predictions_{name}_on_{split_sha256[:24]}.npy")

    def lock(self) -> contextlib.AbstractContextManager[None]:
        """Exclusive use of this build folder: candidates with the same content share it, and may be gated at once."""
        return folder_lock(self.dir)


@contextlib.contextmanager
def folder_lock(folder: Path, name: str = ".lock") -> Iterator[None]:
    """Exclusive use of a build folder across processes (an flock on a file beside or in it)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / name, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def write_json(path: Path, payload: dict) -> None:
    """Write JSON atomically, so a crashed step never leaves a half-written report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, default=float))
    tmp.replace(path)


def save_array(path: Path, array: np.ndarray) -> None:
    """Write a .npy atomically: readers see the old file or the whole new one."""
    tmp = path.with_name(path.stem + ".tmp.npy")
    np.save(tmp, array)
    tmp.replace(path)


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def decide_once(decision_file: Path, choice: dict) -> dict:
    """Record a choice unless another process recorded one first (the file is created exclusively); returns the one that
    stands."""
    decision_file = Path(decision_file)
    decision_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(decision_file, "x") as f:
            json.dump(choice, f, indent=2, sort_keys=True)
        return choice
    except FileExistsError:
        return read_json(decision_file)
