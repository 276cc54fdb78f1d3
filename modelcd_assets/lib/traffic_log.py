"""The traffic log: a bounded, rotating sample of the texts production served, and the live drift verdict judged on it.

The one owner of its format, paths and reading: the server appends (serving/app.py) and exports the verdict
(serving/metrics.py), the live_traffic asset reads a window and writes the verdict. Plain Python only: the
serving process imports it, so no Dagster, torch or pandas here.

Layout, under the state folder: traffic/<model>/current.jsonl and previous.jsonl, each at most max_records // 2
JSON lines {"ts", "version", "text"}; when current is full it is renamed over previous (atomic), so the log never
holds more than max_records and a reader never sees a half-rotated pair. Appends hold a thread lock and an
exclusive flock on traffic/<model>/.lock; readers hold a shared one.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

TRAFFIC_DIR = "traffic"
CURRENT, PREVIOUS, LOCK = "current.jsonl", "previous.jsonl", ".lock"
LIVE_DRIFT_FILE = "live_drift.json"


def folder(state_root: Path, model: str) -> Path:
    """Where one registered model's traffic log and live drift verdict live."""
    return Path(state_root) / TRAFFIC_DIR / model


@dataclass(frozen=True)
class Record:
    ts: float  # seconds since the epoch, when it was served
    version: str  # the registry version that served it
    text: str


@contextmanager
def _locked(where: Path, mode: int) -> Iterator[None]:
    fd = os.open(where / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # releases the flock


class TrafficLog:
    """The append side, for the server: which requests are sampled, and their texts written within the bound.

    Thread-safe, and safe for several processes appending to one model's log: each counts the lines the others appended.
    """

    def __init__(self, state_root: Path, model: str, ratio: float, max_records: int, rng: random.Random | None = None):
        if not 0 <= ratio <= 1 or max_records < 2:
            raise ValueError(f"a traffic log needs 0 <= ratio <= 1 and max_records >= 2, got ratio {ratio}, max_records {max_records}")
        self.folder, self.ratio, self.max_records = folder(state_root, model), ratio, max_records
        self.per_file = max_records // 2
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._open: tuple[int, int, int] | None = None  # (descriptor of current.jsonl, bytes counted, complete lines in them)

    @property
    def enabled(self) -> bool:
        return self.ratio > 0

    def chosen(self) -> bool:
        """Whether this request is sampled: a share `ratio` of requests, each independently; never with ratio 0."""
        return self.ratio > 0 and self._rng.random() < self.ratio

    def append(self, version: str, texts: Sequence[str], ts: float | None = None) -> None:
        """One record per text; raises OSError when the disk refuses (the caller decides what a failed sample costs)."""
        ts = time.time() if ts is None else ts
        lines = [json.dumps({"ts": ts, "version": str(version), "text": t}, ensure_ascii=False).encode() + b"\n" for t in texts]
        lines = lines[-2 * self.per_file:]  # more would only rotate out what this call just wrote
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            with _locked(self.folder, fcntl.LOCK_EX):
                current = self.folder / CURRENT
                while lines:
                    fd, count = self._current(current)
                    room = self.per_file - count
                    if room <= 0:
                        os.replace(current, self.folder / PREVIOUS)
                        continue
                    _append(fd, b"".join(lines[:room]))
                    lines = lines[room:]

    def _current(self, path: Path) -> tuple[int, int]:
        """A descriptor appending to path, and the complete lines in it.

        The descriptor is held open, so its inode cannot be reused: the same inode at path means the same file, and only
        what was appended since the last count (by this process or another) is read. A rotated or removed file is reopened.
        """
        try:
            inode = os.stat(path).st_ino
        except FileNotFoundError:
            inode = None
        if self._open is not None and os.fstat(self._open[0]).st_ino != inode:
            self._close()
        if self._open is None:
            self._open = (os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644), 0, 0)
        fd, counted, lines = self._open
        size = os.fstat(fd).st_size
        if size < counted:  # truncated by someone: count again
            counted, lines = 0, 0
        if size > counted:
            lines += os.pread(fd, size - counted, counted).count(b"\n")
        self._open = (fd, size, lines)
        return fd, lines

    def close(self) -> None:
        """Release the descriptor; a later append opens it again."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._open is not None:
            os.close(self._open[0])
            self._open = None


def _append(fd: int, data: bytes) -> None:
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":  # a writer died mid-line: end that line, so this record stays whole
        data = b"\n" + data
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_lines(path: Path) -> list[bytes]:
    try:
        return path.read_bytes().splitlines(keepends=True)
    except FileNotFoundError:
        return []


def window(state_root: Path, model: str, n: int) -> list[Record]:
    """The newest n records of model's traffic log across both files, oldest first; empty when nothing was sampled.

    A line cut short by a writer that stopped mid-write (no newline, or not a record) is skipped.
    """
    where = folder(state_root, model)
    if not where.is_dir():
        return []
    with _locked(where, fcntl.LOCK_SH):
        lines = _read_lines(where / PREVIOUS) + _read_lines(where / CURRENT)
    records = []
    for line in lines:
        if not line.endswith(b"\n"):
            continue
        try:
            raw = json.loads(line)
            records.append(Record(float(raw["ts"]), str(raw["version"]), str(raw["text"])))
        except (ValueError, KeyError, TypeError):
            continue
    return records[-n:] if n > 0 else []


def has_records(state_root: Path, model: str) -> bool:
    """Whether anything was sampled for model."""
    where = folder(state_root, model)
    return any((where / name).is_file() and (where / name).stat().st_size > 0 for name in (CURRENT, PREVIOUS))


@dataclass(frozen=True)
class LiveDrift:
    """The live drift verdict on one model's traffic window, as the server exports it and the registry tag records it."""

    time: str  # ISO 8601, UTC, when it was judged
    version: str  # the production version judged
    judged: bool  # False when there was not enough traffic, or it could not be checked
    detected: bool  # live inputs drifted from the reference data
    input_drifted_share: float | None  # share of text descriptors that drifted; None when not judged
    descriptors: list[str]  # the descriptors that drifted
    records: int  # sampled texts in the window
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def live_drift_path(state_root: Path, model: str) -> Path:
    return folder(state_root, model) / LIVE_DRIFT_FILE


def write_live_drift(state_root: Path, model: str, verdict: LiveDrift) -> Path:
    """Replace model's live drift verdict atomically, so a scrape never reads half a file."""
    path = live_drift_path(state_root, model)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(verdict.to_dict(), sort_keys=True))
    os.replace(tmp, path)
    return path


def read_live_drift(state_root: Path, model: str) -> LiveDrift | None:
    """The last verdict written for model; None when none was. A malformed file is a ValueError naming it."""
    path = live_drift_path(state_root, model)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    try:
        return LiveDrift(**raw)
    except TypeError as e:
        raise ValueError(f"{path} is not a live drift verdict ({e}); re-materialize live_traffic to rewrite it") from e
