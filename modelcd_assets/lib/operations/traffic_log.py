"""The traffic log: a bounded, rotating sample of the texts production served, and the live drift verdict judged on it.

The one owner of its format, paths and reading: the server appends (serving/sampler.py, off the request path) and exports the
verdict (serving/metrics.py), the live_traffic asset reads a window and writes the verdict. Plain Python only: the
serving process imports it, so no Dagster, torch or pandas here.

Layout, under the state folder: traffic/<model>/current.jsonl and previous.jsonl, each at most max_records // 2
JSON lines {"ts", "version", "text"} and max_bytes // 2 bytes; when current is full it is renamed over previous
(atomic), so the log never holds more than max_records nor max_bytes and a reader never sees a half-rotated pair.
Appends hold a thread lock and an exclusive flock on traffic/<model>/.lock; readers hold a shared one. The texts are
what clients sent: the folders are 0700 and every file in them 0600.
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

from modelcd_assets.lib.layout import StateLayout

CURRENT, PREVIOUS, LOCK = "current.jsonl", "previous.jsonl", ".lock"
LIVE_DRIFT_FILE = "live_drift.json"
FOLDER_MODE, FILE_MODE = 0o700, 0o600
WINDOW_MAX_BYTES = 64 * 2**20  # the most a window reads, whatever the files hold (a log written before the byte bound)
_BLOCK = 2**20


def record_bytes_bound(max_chars: int) -> int:
    """The largest line a text of max_chars characters makes: JSON escapes a control character as 6 bytes, UTF-8 takes at most 4."""
    return 6 * max_chars + 256


SHADOW_PAIRS = "shadow"  # traffic/<model>/shadow/: a rollout's shadowed pairs, production's and the candidate's answers


def folder(state_root: Path, model: str, part: str = "") -> Path:
    """Where one registered model's traffic log and live drift verdict live; with part, a log of its own below it (SHADOW_PAIRS)."""
    where = StateLayout(Path(state_root)).traffic(model)
    return where / part if part else where


@dataclass(frozen=True)
class Record:
    ts: float  # seconds since the epoch, when it was served
    version: str  # the registry version that served it
    text: str


def _private_folder(where: Path, levels: int = 2) -> None:
    """Create the last `levels` folders of where owner-only (traffic/ and traffic/<model>, and a part below it), and tighten
    them if an earlier version left them open."""
    chain = [*reversed(where.parents[: levels - 1]), where]
    chain[0].parent.mkdir(parents=True, exist_ok=True)
    for path in chain:
        path.mkdir(mode=FOLDER_MODE, exist_ok=True)
        if os.stat(path).st_mode & 0o077:
            os.chmod(path, FOLDER_MODE)


def _open_private(path: Path, flags: int) -> int:
    """A descriptor on path, created 0600; an existing file left readable by an earlier version is tightened."""
    fd = os.open(path, flags | os.O_CREAT, FILE_MODE)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def _locked(where: Path, mode: int) -> Iterator[None]:
    fd = _open_private(where / LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # releases the flock


class TrafficLog:
    """The append side, for the server: which requests are sampled, and their texts written within the bound.

    Thread-safe, and safe for several processes appending to one model's log: each counts the lines the others appended.
    A record longer than max_record_bytes is not written (append says how many were left out).
    """

    def __init__(
        self,
        state_root: Path,
        model: str,
        ratio: float,
        max_records: int,
        rng: random.Random | None = None,
        *,
        max_bytes: int = 64 * 2**20,
        max_record_bytes: int | None = None,
        part: str = "",
    ):
        max_record_bytes = max_bytes // 2 - 1 if max_record_bytes is None else max_record_bytes
        if not 0 <= ratio <= 1 or max_records < 2 or not 0 < max_record_bytes < max_bytes // 2:
            raise ValueError(
                f"a traffic log needs 0 <= ratio <= 1, max_records >= 2 and 0 < max_record_bytes < max_bytes // 2, got ratio {ratio}, "
                f"max_records {max_records}, max_bytes {max_bytes}, max_record_bytes {max_record_bytes}"
            )
        self.folder, self.ratio, self.max_records, self.max_bytes = folder(state_root, model, part), ratio, max_records, max_bytes
        self._levels = 3 if part else 2
        self.per_file, self.per_file_bytes, self.max_record_bytes = max_records // 2, max_bytes // 2, max_record_bytes
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._open: tuple[int, int, int] | None = None  # (descriptor of current.jsonl, bytes counted, complete lines in them)

    @property
    def enabled(self) -> bool:
        return self.ratio > 0

    def chosen(self) -> bool:
        """Whether this request is sampled: a share `ratio` of requests, each independently; never with ratio 0."""
        return self.ratio > 0 and self._rng.random() < self.ratio

    def append(self, version: str, texts: Sequence[str], ts: float | None = None) -> int:
        """One record per text; returns how many were too long to keep. Raises OSError when the disk refuses (the caller
        decides what a failed sample costs)."""
        ts = time.time() if ts is None else ts
        return self.append_records([{"ts": ts, "version": str(version), "text": t} for t in texts])

    def append_records(self, records: Sequence[dict]) -> int:
        """One JSON line per record, as append writes them; returns how many were too long to keep."""
        lines = [json.dumps(r, ensure_ascii=False).encode("utf-8", "replace") + b"\n" for r in records]
        fits = [line for line in lines if len(line) <= self.max_record_bytes]
        pending = fits[-2 * self.per_file :]  # more would only rotate out what this call just wrote
        with self._lock:
            _private_folder(self.folder, self._levels)
            with _locked(self.folder, fcntl.LOCK_EX):
                current = self.folder / CURRENT
                while pending:
                    fd, count, size = self._current(current)
                    room, room_bytes = 0, self.per_file_bytes - size - 1  # 1: the newline _append may add to a torn line
                    while room < len(pending) and count + room < self.per_file and len(pending[room]) <= room_bytes:
                        room_bytes -= len(pending[room])
                        room += 1
                    if room == 0:  # full; an empty file always takes one record, as max_record_bytes < per_file_bytes
                        os.replace(current, self.folder / PREVIOUS)
                        continue
                    _append(fd, b"".join(pending[:room]))
                    pending = pending[room:]
        return len(lines) - len(fits)

    def _current(self, path: Path) -> tuple[int, int, int]:
        """A descriptor appending to path, the complete lines in it, and its size.

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
            self._open = (_open_private(path, os.O_RDWR | os.O_APPEND), 0, 0)
        fd, counted, lines = self._open
        size = os.fstat(fd).st_size
        if size < counted:  # truncated by someone: count again
            counted, lines = 0, 0
        while counted < size:  # block by block: what others appended is never read whole into memory
            block = os.pread(fd, min(_BLOCK, size - counted), counted)
            if not block:
                break
            lines += block.count(b"\n")
            counted += len(block)
        self._open = (fd, counted, lines)
        return fd, lines, counted

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
        view = view[os.write(fd, view) :]


def _tail_lines(path: Path, n: int, budget: int) -> tuple[list[bytes], int]:
    """The last n complete lines of path, read backwards from its end, never more than budget bytes; and the bytes read.

    A line whose start lies beyond the budget is left out, as is a last line with no newline (a torn write).
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return [], 0
    try:
        end = pos = os.fstat(fd).st_size
        blocks: list[bytes] = []
        newlines = 0
        while pos > 0 and end - pos < budget and newlines <= n:
            step = min(_BLOCK, pos, budget - (end - pos))
            pos -= step
            blocks.append(os.pread(fd, step, pos))
            newlines += blocks[-1].count(b"\n")
    finally:
        os.close(fd)
    data = b"".join(reversed(blocks))
    lines = data.splitlines(keepends=True)
    if pos > 0 and lines:  # began mid-line
        lines = lines[1:]
    if lines and not lines[-1].endswith(b"\n"):
        lines = lines[:-1]
    return lines[-n:] if n > 0 else [], end - pos


def window(state_root: Path, model: str, n: int, max_bytes: int = WINDOW_MAX_BYTES) -> list[Record]:
    """The newest n records of model's traffic log across both files, oldest first; empty when nothing was sampled.

    Files are read from their end, at most max_bytes in all. A line cut short by a writer that stopped mid-write (no
    newline, or not a record) is skipped.
    """
    where = folder(state_root, model)
    if not where.is_dir() or n <= 0:
        return []
    with _locked(where, fcntl.LOCK_SH):
        newest, spent = _tail_lines(where / CURRENT, n, max_bytes)
        older, _ = _tail_lines(where / PREVIOUS, n - len(newest), max_bytes - spent) if len(newest) < n and spent < max_bytes else ([], 0)
    lines = older + newest
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
    _private_folder(path.parent)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    fd = _open_private(tmp, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(verdict.to_dict(), sort_keys=True))
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
