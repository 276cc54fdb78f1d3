"""Artifact safety: refuse what could execute code or escape its folder, before any weight is deserialized.

Everything here reads bytes, JSON and protobuf only; nothing in a candidate is imported, unpickled or loaded.
Only known file types pass: safetensors, JSON/config, tokenizer files, ONNX with its external data, text docs.

ONNX external data: a file that an ONNX model here names as external data is raw tensor bytes to ONNX Runtime, but
other loaders choose a file by its name and content, so being named vouches for nothing. Every such file is scanned
like any other, and it must also be raw data: its name ends in `.data`, `.onnx_data`, `.weight` or `.bias`, has no
suffix at all (per-tensor files named after the tensor), or matches a `safety.allow` pattern; and its first bytes are
none of the code-running formats below (pickle, zip, HDF5, .npy, executable). A name that is a loadable format of its
own (`.safetensors`, `.json`, `.bin`, `.pt`, ...) is refused as external data, whatever it holds.
"""

from __future__ import annotations

import codecs
import json
import os
import struct
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath, PureWindowsPath

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib", ".npy", ".npz")
CODE_SUFFIXES = (".py", ".pyc", ".so", ".dll", ".dylib")
TEXT_SUFFIXES = (".md", ".txt")
# chat_template.jinja: the chat template transformers saves beside the tokenizer (rendered in a sandboxed Jinja environment
# by transformers and ONNX Runtime GenAI, never imported or run as code); read as plain text like the others.
TEXT_NAMES = ("license", ".gitattributes", "chat_template.jinja")
SENTENCEPIECE_NAMES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
NOT_ALLOWED = (
    "not an allowed file type (safetensors, JSON/config, tokenizer files, ONNX, text docs); "
    "remove it, or allow the pattern in the policy's safety.allow"
)
# Leading bytes of formats that can run code when loaded, whatever the file is called: pickles (protocol 2+),
# zips (torch.save, .keras, .npz hold pickles or Lambda code), HDF5 (Keras .h5 Lambda layers), .npy (object arrays), executables.
CODE_MAGIC = {
    b"\x80\x02": "a pickle",
    b"\x80\x03": "a pickle",
    b"\x80\x04": "a pickle",
    b"\x80\x05": "a pickle",
    b"PK\x03\x04": "a zip archive",
    b"\x89HDF\r\n\x1a\n": "HDF5",
    b"\x93NUMPY": "a numpy array",
    b"\x7fELF": "an executable",
}
EXTERNAL_DATA_SUFFIXES = (".data", ".onnx_data", ".weight", ".bias")
EXTERNAL_NOT_RAW = (
    "named as ONNX external data, but external data must be raw tensor bytes in a file named *.data, "
    "*.onnx_data, *.weight, *.bias or without a suffix; rename it (and its location in the ONNX graph), "
    "or allow the pattern in the policy's safety.allow"
)
SAFETENSORS_DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


@dataclass(frozen=True)
class SafetyLimits:
    max_total_bytes: int = 4 << 30
    max_file_bytes: int = 2 << 30
    max_files: int = 200
    max_safetensors_header_bytes: int = 25 << 20
    allow: tuple[str, ...] = ()  # globs on the path relative to the artifact root, exempt from the file-type allowlist


@dataclass(frozen=True)
class Finding:
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def _safetensors_problem(path: Path, limits: SafetyLimits) -> str | None:
    """Why a safetensors file would not load, or None: header size, JSON, dtypes, shapes, and tensors tiling the data exactly."""
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
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
            return f"safetensors header is not valid JSON ({e})"
    if not isinstance(header, dict):
        return "safetensors header is not a JSON object"
    data_len = size - 8 - n
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            if not (isinstance(info, dict) and all(isinstance(v, str) for v in info.values())):
                return "safetensors __metadata__ is not a map of strings"
            continue
        if not isinstance(info, dict) or info.get("dtype") not in SAFETENSORS_DTYPE_BYTES:
            return f"tensor {name!r} has an unknown dtype {info.get('dtype') if isinstance(info, dict) else info!r}"
        shape, offsets = info.get("shape"), info.get("data_offsets")
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
            return f"tensor {name!r} has an invalid shape {shape!r}"
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets) and 0 <= offsets[0] <= offsets[1]):
            return f"tensor {name!r} has invalid data_offsets {offsets!r}"
        count = 1
        for d in shape:
            count *= d
        if offsets[1] - offsets[0] != count * SAFETENSORS_DTYPE_BYTES[info["dtype"]]:
            return (
                f"tensor {name!r} spans {offsets[1] - offsets[0]} bytes, but {info['dtype']}{shape} needs"
                f" {count * SAFETENSORS_DTYPE_BYTES[info['dtype']]}"
            )
        if offsets[1] > data_len:
            return f"tensor {name!r} ends at byte {offsets[1]} but the data section has {data_len} (truncated file)"
        spans.append((offsets[0], offsets[1], name))
    # The safetensors loader refuses a data section that the tensors do not cover exactly, in order.
    end, previous = 0, None
    for start, stop, name in sorted(spans):
        if start < end:
            return f"tensors {previous!r} and {name!r} overlap (bytes {start}..{end})"
        if start > end:
            return f"{start - end} unused bytes before tensor {name!r} (a gap at byte {end} of the data section)"
        end, previous = stop, name
    if end != data_len:
        return f"{data_len - end} trailing bytes after the last tensor (data section has {data_len}, tensors cover {end})"
    return None


def _onnx_tensors(message):
    """Every TensorProto anywhere in an ONNX protobuf: initializers, sparse tensors, attributes, subgraphs, functions."""
    from google.protobuf.message import Message

    if message.DESCRIPTOR.full_name == "onnx.TensorProto":
        yield message
        return
    for field, value in message.ListFields():
        if field.message_type is not None:
            for item in [value] if isinstance(value, Message) else value:
                yield from _onnx_tensors(item)


def _external_data_file(base: Path, root: Path, info: dict[str, str]) -> tuple[Path | None, str | None]:
    """The regular file inside root that one external-data entry reads, or why it is refused."""
    location = info.get("location", "")
    parts = PurePosixPath(location.replace("\\", "/")).parts
    if not parts or "\0" in location:
        return None, f"external data location {location!r} is empty or malformed"
    if PurePosixPath(parts[0]).is_absolute() or PureWindowsPath(location).drive or ".." in parts:
        return None, f"external data location {location!r} escapes the candidate folder"
    target = base
    for part in parts:
        target = target / part
        if target.is_symlink():
            return (
                None,
                (
                    f"external data location {location!r} goes through a symlink ({target.relative_to(root).as_posix()}); copy the data"
                    " instead"
                ),
            )
    if root not in target.resolve().parents:
        return None, f"external data location {location!r} escapes the candidate folder"
    if not target.is_file():
        return None, f"external data file {location!r} is missing or not a regular file"
    size = target.stat().st_size
    try:
        offset = int(info.get("offset", "0"))
        length = int(info.get("length", str(size - offset)))
    except ValueError:
        return None, f"external data in {location!r} has a non-integer offset or length"
    if offset < 0 or length < 0 or offset + length > size:
        return None, f"external data in {location!r} (offset {offset}, length {length}) runs past its {size} bytes"
    return target, None


def _onnx_external_data(path: Path, root: Path) -> tuple[str | None, set[Path]]:
    """Why an ONNX model's external data is refused (or None), and the files it reads; nothing is loaded."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - onnx raises several parser errors
        return f"ONNX file does not parse ({type(e).__name__})", set()
    files = set()
    for tensor in _onnx_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        # Key/value pairs read directly: older onnx's ExternalDataInfo setattr()s any key a file declares (CVE-2026-34445).
        info = {e.key: e.value for e in tensor.external_data}
        try:
            target, problem = _external_data_file(path.parent, root, info)
        except OSError as e:  # e.g. a name too long for the filesystem
            target, problem = None, f"external data location {info.get('location')!r} cannot be checked ({e.strerror})"
        if problem:
            return f"tensor {tensor.name!r}: {problem}", files
        files.add(target)
    return None, files


def _code_magic_problem(path: Path) -> str | None:
    """A file whose first bytes say pickle, zip, HDF5, .npy or executable, whatever its name."""
    with open(path, "rb") as f:
        head = f.read(8)
    for magic, kind in CODE_MAGIC.items():
        if head.startswith(magic):
            return f"content is {kind}, which can run code when loaded, whatever the file is called; convert the weights to safetensors"
    return None


def _json_problem(path: Path) -> str | None:
    try:
        cfg = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return "not valid JSON"
    if isinstance(cfg, dict) and "auto_map" in cfg:
        return "declares auto_map (remote code); modelcd never sets trust_remote_code"
    return None


def _text_problem(path: Path) -> str | None:
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                if b"\0" in chunk:
                    return "not UTF-8 text (NUL bytes); text docs and vocabularies must be plain text"
                decoder.decode(chunk)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return "not UTF-8 text; text docs and vocabularies must be plain text"
    return None


def _file_problem(p: Path, name: str, rel: str, limits: SafetyLimits) -> str | None:
    """Why one regular file of an allowed type is malformed, or why its type is refused."""
    if name.endswith(".safetensors"):
        return _safetensors_problem(p, limits)
    problem = _code_magic_problem(p)
    if problem:
        return problem
    if name.endswith(".json"):
        return _json_problem(p)
    if name in SENTENCEPIECE_NAMES:
        with open(p, "rb") as f:
            # A sentencepiece ModelProto starts with its first `pieces` entry: field 1, length-delimited.
            return None if f.read(1) == b"\x0a" else "not a sentencepiece model (protobuf)"
    if name.endswith(TEXT_SUFFIXES) or name in TEXT_NAMES:
        return _text_problem(p)
    if any(fnmatchcase(rel, pattern) for pattern in limits.allow):
        return None
    return NOT_ALLOWED


def _external_data_problem(p: Path, name: str, rel: str, limits: SafetyLimits) -> str | None:
    """Why a file an ONNX model names as external data is refused: its content, as for any file, or a name that is not raw data."""
    if name.endswith(EXTERNAL_DATA_SUFFIXES) or "." not in name:
        return _code_magic_problem(p)
    problem = _file_problem(p, name, rel, limits)
    if problem not in (None, NOT_ALLOWED) or any(fnmatchcase(rel, pattern) for pattern in limits.allow):
        return problem
    return EXTERNAL_NOT_RAW


def _inside(p: Path, root: Path) -> bool:
    try:
        target = p.resolve()
    except (OSError, RuntimeError):  # symlink loops
        return False
    return target == root or root in target.parents


def scan_artifact(folder: Path, limits: SafetyLimits = SafetyLimits()) -> list[Finding]:
    """Every reason to refuse the artifact in folder; empty when it is safe to load."""
    root = Path(folder).resolve()
    findings: list[Finding] = []
    total = 0
    entries = sorted(root.rglob("*"))
    if len(entries) > limits.max_files:
        findings.append(Finding(".", f"{len(entries)} files, over the limit of {limits.max_files}"))
    # ONNX first, to know which files are external data; those are still scanned for content (module docstring).
    onnx_problems: dict[Path, str | None] = {}
    external: set[Path] = set()
    for p in entries:
        if p.name.lower().endswith(".onnx") and _inside(p, root) and p.is_file() and p.stat().st_size <= limits.max_file_bytes:
            onnx_problems[p], files = _onnx_external_data(p, root)
            external |= files
    for p in entries:
        rel = p.relative_to(root).as_posix()
        if ".." in Path(rel).parts:
            findings.append(Finding(rel, "path contains '..'"))
            continue
        if p.is_symlink() and not _inside(p, root):
            findings.append(Finding(rel, f"symlink points outside the candidate folder ({os.readlink(p)})"))
            continue
        if p.is_dir():
            continue
        if not p.is_file():
            findings.append(Finding(rel, "not a regular file (a dangling link, pipe, socket or device)"))
            continue
        st = p.stat()
        if st.st_nlink > 1:
            findings.append(Finding(rel, f"hard link shared with {st.st_nlink - 1} other path(s); copy the file instead"))
        total += st.st_size
        if st.st_size > limits.max_file_bytes:
            findings.append(Finding(rel, f"{st.st_size} bytes, over the per-file limit of {limits.max_file_bytes}"))
        name = p.name.lower()
        if name.endswith(PICKLE_SUFFIXES) or ".joblib" in name:
            problem = "pickle-based weights can run code when loaded; convert to safetensors"
        elif name.endswith(CODE_SUFFIXES):
            problem = "code files are refused; modelcd never sets trust_remote_code"
        elif name.endswith(".onnx"):
            problem = onnx_problems.get(p)
        elif p in external:
            problem = _external_data_problem(p, name, rel, limits)
        else:
            problem = _file_problem(p, name, rel, limits)
        if problem:
            findings.append(Finding(rel, problem))
    if total > limits.max_total_bytes:
        findings.append(Finding(".", f"{total} bytes in all, over the limit of {limits.max_total_bytes}"))
    return findings
