"""Child processes that take their own children with them: started in a session of their own, stopped as a group."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
# Looked up before any fork: the child of a threaded parent must not dlopen.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    pgid: int
    started: int  # clock ticks after boot


def processes() -> dict[int, ProcessInfo]:
    """Every live process this machine's /proc shows, zombies left out; empty where there is no /proc."""
    table = {}
    if not PROC.is_dir():
        return table
    for entry in os.scandir(PROC):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # it exited meanwhile
            continue
        # The command name in parentheses may itself hold spaces and parentheses.
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] not in ("Z", "X"):
            table[int(entry.name)] = ProcessInfo(int(entry.name), int(fields[1]), int(fields[2]), int(fields[19]))
    return table


def descendants(pid: int, table: dict[int, ProcessInfo] | None = None) -> list[ProcessInfo]:
    """The live children of pid, their children, and so on."""
    table = processes() if table is None else table
    children: dict[int, list[ProcessInfo]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def preserved_stop_signals() -> Iterator[None]:
    """Put SIGINT's and SIGTERM's handlers back as they were when the block ends.

    Dagster's in-process execution maps SIGTERM onto the SIGINT handler and leaves it so. In a process started
    in the background SIGINT is ignored, so SIGTERM would be ignored from then on, by the process and by every
    child it starts: `modelcd gate` and the servers it spawns could no longer be stopped. Main thread only.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


def _prepare_child(parent: int, die_with_parent: bool) -> None:
    # A parent started in the background hands SIGINT down ignored; exec keeps SIG_IGN, and dagster dev
    # even maps SIGTERM onto its SIGINT handler, so the child would ignore both.
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    if die_with_parent and _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)


def start_process(args: list[str], die_with_parent: bool = False, **popen) -> subprocess.Popen:
    """Popen in a new session, so that stop_process reaches everything it starts, with SIGINT at its default.

    die_with_parent: on Linux, the child gets SIGTERM when the thread that started it exits, even by SIGKILL.
    """
    return subprocess.Popen(
        args, start_new_session=True, preexec_fn=functools.partial(_prepare_child, os.getpid(), die_with_parent), **popen
    )


def _group_alive(pgid: int) -> bool:
    if not PROC.is_dir():
        try:
            os.killpg(pgid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False
    return any(info.pgid == pgid for info in processes().values())


def _signal(proc: subprocess.Popen, sig: int) -> None:
    # A live group whose id is proc's pid is proc's own (Linux never hands out a pid still in use as a
    # group id), and it outlives proc when proc exits first: signal the group, not just proc.
    if _group_alive(proc.pid):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    elif proc.poll() is None:
        proc.send_signal(sig)


def stop_processes(procs: list[subprocess.Popen], timeout: float = 20.0) -> list[int]:
    """SIGTERM each process and its group at once, wait up to timeout for all of them, then SIGKILL what is left; returns the exit codes."""
    for proc in procs:
        _signal(proc, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    while time.monotonic() < deadline and any(_group_alive(proc.pid) for proc in procs):
        time.sleep(0.1)
    for proc in procs:
        _signal(proc, signal.SIGKILL)
    return [proc.wait() for proc in procs]


def stop_process(proc: subprocess.Popen, timeout: float = 20.0) -> int:
    """SIGTERM the process (and its group, when it leads one), wait up to timeout, then SIGKILL; returns the exit code."""
    return stop_processes([proc], timeout)[0]


def interrupt_process(proc: subprocess.Popen, grace: float = 60.0, timeout: float = 20.0) -> int:
    """SIGINT the process and its group, as Ctrl-C would, so that it runs its own cleanup (a Python program's finally blocks);
    after grace seconds, stop_process. Returns the exit code."""
    _signal(proc, signal.SIGINT)
    try:
        return proc.wait(grace)
    except subprocess.TimeoutExpired:
        return stop_process(proc, timeout)
