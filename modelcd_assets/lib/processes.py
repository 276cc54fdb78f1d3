"""Stopping child processes: politely first, then for sure."""

from __future__ import annotations

import subprocess


def stop_process(proc: subprocess.Popen, timeout: float = 20.0) -> int:
    """SIGTERM, wait up to timeout, then SIGKILL; returns the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()
