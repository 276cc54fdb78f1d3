"""Child processes stop with their whole group, die with a SIGKILLed parent, and a test run fails when one outlives it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from modelcd_assets.lib.operations.processes import descendants, processes, start_process, stop_process
from modelcd_assets_tests.process_leaks import cmdline

ROOT = Path(__file__).resolve().parents[3]
# Every process in this group ignores SIGTERM (an ignored signal survives fork and exec): only SIGKILL ends them.
STUBBORN = "trap '' TERM; (trap '' TERM; sleep 60) & sleep 60 & wait"


# A killed process is gone only once the kernel has ended it and its parent (init, for an orphan) has reaped it; on a loaded
# machine that takes a while after the signal, so every "it is gone" is a wait with a deadline, not a single look.
GONE_WITHIN = 30.0


def left_after_waiting(infos, within: float = GONE_WITHIN) -> list:
    """Of the processes infos named (pid and start time, so a reused pid does not count), those still alive after waiting up to within
    seconds."""
    deadline = time.monotonic() + within
    while True:
        table = processes()
        left = [info for info in infos if info.pid in table and table[info.pid].started == info.started]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def test_descendants_walks_children_and_grandchildren_and_leaves_zombies_out():
    proc = start_process(["bash", "-c", STUBBORN])
    try:
        time.sleep(0.5)
        tree = descendants(proc.pid)
        assert len(tree) == 2 and all(info.pgid == proc.pid for info in tree)
        assert {proc.pid, *(info.pid for info in tree)} <= {info.pid for info in descendants(os.getpid())}
    finally:
        stop_process(proc, timeout=1)
    assert left_after_waiting(tree) == []
    assert not descendants(proc.pid)
    zombie = subprocess.Popen(["true"])
    os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped (however long the exit takes)
    assert zombie.pid not in {info.pid for info in descendants(os.getpid())}
    zombie.wait()


def test_stop_process_sigkills_the_group_after_the_timeout():
    proc = start_process(["bash", "-c", STUBBORN])
    time.sleep(0.5)
    tree = descendants(proc.pid)
    start = time.monotonic()
    assert stop_process(proc, timeout=1) == -9
    assert time.monotonic() - start < 5
    assert len(tree) == 2 and left_after_waiting(tree) == []  # SIGKILLed with the group; reaped by init, in its own time


def test_stop_process_signals_only_the_process_when_it_leads_no_group():
    proc = subprocess.Popen(["sleep", "60"])
    assert stop_process(proc) == -15


def test_a_child_started_with_die_with_parent_dies_with_a_sigkilled_parent():
    script = (
        "from modelcd_assets.lib.operations.processes import start_process; import time; print(start_process(['sleep', '60'],"
        " die_with_parent=True).pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    info = processes()[child]
    parent.kill()
    parent.wait()
    assert left_after_waiting([info]) == []


@pytest.fixture
def sigint_ignored():
    """SIGINT as a background start leaves it (a non-interactive shell, nohup, some CI runners)."""
    import signal

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_dagsters_sigterm_remap_is_undone_so_children_still_stop(sigint_ignored):
    """Measured in a fresh-clone CI run started in the background: after an in-process Dagster run, every child ignored SIGTERM."""
    import signal

    from dagster._utils.interrupts import capture_interrupts

    from modelcd_assets.lib.operations.processes import preserved_stop_signals

    with capture_interrupts():
        pass
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # Dagster's doing: SIGTERM := SIGINT's handler, left so
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with preserved_stop_signals(), capture_interrupts():
        pass
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert stop_process(subprocess.Popen(["sleep", "60"]), timeout=5) == -15


LEAKY = """
import subprocess

def test_leaks_a_child():
    subprocess.Popen(["sleep", "3601"])

def test_leaks_an_orphan():
    subprocess.run(["bash", "-c", "sleep 3602 >/dev/null 2>&1 &"], check=True)
"""


def run_inner(pytester, monkeypatch, source: str):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(source)
    return pytester.runpytest_subprocess("-p", "modelcd_assets_tests.process_leaks", "-p", "no:cacheprovider")


def test_the_leak_check_fails_a_green_run_names_each_leak_and_ends_it(pytester, monkeypatch):
    result = run_inner(pytester, monkeypatch, LEAKY)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # The orphan is named as it is when the check looks: on a busy machine its forked shell may not have exec'd sleep yet.
    result.stdout.fnmatch_lines(
        ["*2 processes outlived the test run; killed them*", "pid *: *sleep 360?*", "pid *: *sleep 360?*", "*2 passed*"]
    )
    deadline = time.monotonic() + GONE_WITHIN
    while (leaks := [pid for pid in processes() if cmdline(pid) in ("sleep 3601", "sleep 3602")]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not leaks


def test_the_leak_check_passes_a_run_that_waits_for_its_children(pytester, monkeypatch):
    result = run_inner(pytester, monkeypatch, "import subprocess\n\ndef test_waits():\n    subprocess.run(['sleep', '0.1'], check=True)\n")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line("*outlived*")
