"""A pytest plugin: the run fails when a process it started outlives it, and those processes are ended."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest

from modelcd_assets.lib.operations.processes import PROC, ProcessInfo, descendants, processes

MARKER = "MODELCD_TEST_SESSION"
# Python's own helpers: they live as long as the process that started them, and exit with it.
HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
SINCE = pytest.StashKey[int]()
LEAKS = pytest.StashKey[dict[int, str]]()


def cmdline(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def carries(pid: int, entry: str) -> bool:
    """Whether the environment pid started with holds entry ("NAME=value")."""
    try:
        return f"\0{entry}\0".encode() in b"\0" + (PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, or another user's
        return False


def leaked(root: int, marker: str, since: int) -> list[ProcessInfo]:
    """root's live descendants, and processes started at or after since (clock ticks after boot) that carry marker in
    their environment: the orphans root's children left, reparented to init or a subreaper."""
    table = processes()
    found = {info.pid: info for info in descendants(root, table)}
    for info in table.values():
        if info.pid != root and info.pid not in found and info.started >= since and carries(info.pid, marker):
            found[info.pid] = info
    return [info for info in found.values() if not any(helper in cmdline(info.pid) for helper in HELPERS)]


def boot_ticks() -> int:
    """Now, in the clock ticks after boot that /proc/PID/stat gives start times in."""
    return int(float((PROC / "uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


def pytest_sessionstart(session: pytest.Session) -> None:
    if PROC.is_dir():
        # One value per run: concurrent runs from the same checkout share its .venv, so a command line cannot tell
        # their processes apart; the environment every child inherits can.
        session.config.stash[SINCE] = boot_ticks()
        os.environ[MARKER] = f"{os.getpid()}-{time.time_ns()}"


def pytest_sessionfinish(session: pytest.Session) -> None:
    if SINCE not in session.config.stash:
        return
    marker, since = f"{MARKER}={os.environ[MARKER]}", session.config.stash[SINCE]
    found = leaked(os.getpid(), marker, since)
    if not found:
        return
    if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    report = session.config.stash.setdefault(LEAKS, {})
    for _ in range(3):  # a dying parent may have started one more
        for info in found:
            report.setdefault(info.pid, cmdline(info.pid))
            with contextlib.suppress(ProcessLookupError):
                os.kill(info.pid, signal.SIGKILL)
        time.sleep(0.2)
        found = leaked(os.getpid(), marker, since)
        if not found:
            break


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    leaks = config.stash.get(LEAKS, {})
    if leaks:
        terminalreporter.write_sep("=", f"{len(leaks)} processes outlived the test run; killed them", red=True)
        for pid, command in leaks.items():
            terminalreporter.write_line(f"pid {pid}: {command}")
