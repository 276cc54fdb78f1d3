"""Artifact safety: refuse what could execute code or escape its folder, before any weight is deserialized.

Everything here reads bytes and JSON only; nothing in a candidate is imported, unpickled or loaded.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib", ".npy", ".npz")
CODE_SUFFIXES = (".py", ".pyc", ".so", ".dll", ".dylib")
SAFETENSORS_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
                           "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


@dataclass(frozen=True)
class SafetyLimits:
    max_total_bytes: int = 4 << 30
    max_file_bytes: int = 2 << 30
    max_files: int = 200
    max_safetensors_header_bytes: int = 25 << 20


@dataclass(frozen=True)
class Finding:
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def _safetensors_problem(path: Path, limits: SafetyLimits) -> str | None:
    """Why a safetensors file is malformed, or None: header size, JSON, dtypes, offsets and total length."""
    size = path.stat().st_size
    if size < 8:
        return "safetensors file is shorter than its 8-byte header length"
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > limits.max_safetensors_header_bytes:
            return f"safetensors header claims {n} bytes, over the {limits.max_safetensors_header_bytes} byte limit"
        if 8 + n > size:
            return f"safetensors header claims {n} bytes but the file has only {size - 8} after the length"
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return f"safetensors header is not valid JSON ({e})"
    if not isinstance(header, dict):
        return "safetensors header is not a JSON object"
    data_len = size - 8 - n
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict) or info.get("dtype") not in SAFETENSORS_DTYPE_BYTES:
            return f"tensor {name!r} has an unknown dtype {info.get('dtype') if isinstance(info, dict) else info!r}"
        shape, offsets = info.get("shape"), info.get("data_offsets")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            return f"tensor {name!r} has an invalid shape {shape!r}"
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets) and 0 <= offsets[0] <= offsets[1]):
            return f"tensor {name!r} has invalid data_offsets {offsets!r}"
        count = 1
        for d in shape:
            count *= d
        if offsets[1] - offsets[0] != count * SAFETENSORS_DTYPE_BYTES[info["dtype"]]:
            return f"tensor {name!r} spans {offsets[1] - offsets[0]} bytes, but {info['dtype']}{shape} needs {count * SAFETENSORS_DTYPE_BYTES[info['dtype']]}"
        if offsets[1] > data_len:
            return f"tensor {name!r} ends at byte {offsets[1]} but the data section has {data_len} (truncated file)"
        spans.append(tuple(offsets))
    spans.sort()
    for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
        if b0 < a1:
            return "safetensors tensors overlap"
    return None


def _onnx_external_data_problem(path: Path, root: Path) -> str | None:
    """An ONNX model whose external-data location leaves the candidate folder."""
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - onnx raises several parser errors
        return f"ONNX file does not parse ({type(e).__name__})"
    for tensor in _get_all_tensors(model):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = ExternalDataInfo(tensor).location
            target = (path.parent / location).resolve()
            if os.path.isabs(location) or ".." in Path(location).parts or root not in target.parents:
                return f"external data location {location!r} escapes the candidate folder"
    return None


def scan_artifact(folder: Path, limits: SafetyLimits = SafetyLimits()) -> list[Finding]:
    """Every reason to refuse the artifact in folder; empty when it is safe to load."""
    root = Path(folder).resolve()
    findings: list[Finding] = []
    total = 0
    entries = sorted(Path(folder).rglob("*"))
    if len(entries) > limits.max_files:
        findings.append(Finding(".", f"{len(entries)} files, over the limit of {limits.max_files}"))
    for p in entries:
        rel = p.relative_to(folder).as_posix()
        if ".." in Path(rel).parts:
            findings.append(Finding(rel, "path contains '..'"))
            continue
        if p.is_symlink():
            target = p.resolve()
            if root != target and root not in target.parents:
                findings.append(Finding(rel, f"symlink points outside the candidate folder ({os.readlink(p)})"))
            continue
        if p.is_dir():
            continue
        st = p.stat()
        if st.st_nlink > 1:
            findings.append(Finding(rel, f"hard link shared with {st.st_nlink - 1} other path(s); copy the file instead"))
        total += st.st_size
        if st.st_size > limits.max_file_bytes:
            findings.append(Finding(rel, f"{st.st_size} bytes, over the per-file limit of {limits.max_file_bytes}"))
        name = p.name.lower()
        if name.endswith(PICKLE_SUFFIXES) or ".joblib" in name:
            findings.append(Finding(rel, "pickle-based weights can run code when loaded; convert to safetensors"))
        elif name.endswith(CODE_SUFFIXES):
            findings.append(Finding(rel, "code files are refused; modelcd never sets trust_remote_code"))
        elif name.endswith(".safetensors"):
            problem = _safetensors_problem(p, limits)
            if problem:
                findings.append(Finding(rel, problem))
        elif name.endswith(".onnx"):
            problem = _onnx_external_data_problem(p, root)
            if problem:
                findings.append(Finding(rel, problem))
        elif name.endswith(".json"):
            try:
                cfg = json.loads(p.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError):
                findings.append(Finding(rel, "not valid JSON"))
                continue
            if isinstance(cfg, dict) and "auto_map" in cfg:
                findings.append(Finding(rel, "declares auto_map (remote code); modelcd never sets trust_remote_code"))
    if total > limits.max_total_bytes:
        findings.append(Finding(".", f"{total} bytes in all, over the limit of {limits.max_total_bytes}"))
    return findings
