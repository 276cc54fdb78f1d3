"""Content hashes of files, folders and arrays."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """sha256 of one file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def bytes_sha256(data: bytes) -> str:
    """sha256 of bytes already read (the server hashes an artifact's bytes and opens its session from those same bytes)."""
    return hashlib.sha256(data).hexdigest()


def folder_manifest(folder: Path) -> dict[str, str]:
    """Relative path -> sha256 for every regular file under folder, sorted by path."""
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return {p.relative_to(folder).as_posix(): file_sha256(p) for p in files}


def manifest_hash(manifest: dict[str, str]) -> str:
    """One hash for a whole manifest, independent of where the folder lives."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def folder_hash(folder: Path, exclude: tuple[str, ...] = ("README.md",)) -> str:
    """Content hash of a folder: its files' names and bytes, ignoring free-text READMEs."""
    manifest = {k: v for k, v in folder_manifest(folder).items() if Path(k).name not in exclude}
    return manifest_hash(manifest)


def text_hash(*parts: str) -> str:
    """sha256 of strings joined unambiguously."""
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p.encode())
    return h.hexdigest()
