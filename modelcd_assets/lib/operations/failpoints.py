"""Named failpoints for the crash-safety and race tests.

MODELCD_FAILPOINT=NAME makes the process SIGKILL itself at NAME, as a power cut or an OOM kill would.
MODELCD_FAILPOINT=NAME:sleep=SECONDS makes it sleep there instead, to hold a window open (the alias lock's race test).
"""

from __future__ import annotations

import os
import signal
import time

ENV = "MODELCD_FAILPOINT"
# Every point the tests exercise, in the order a gated run (or a rollback) reaches them.
POINTS = ("mid_quantization", "before_promotion", "between_compare_and_set", "after_tags", "after_alias", "mid_rollback")


def _action(setting: str) -> tuple[str, float | None]:
    """The point a MODELCD_FAILPOINT value names, and the seconds to sleep there (None: die)."""
    name, sep, action = setting.partition(":")
    if name not in POINTS:
        raise ValueError(f"{ENV}={setting!r} names no failpoint; known: {', '.join(POINTS)}")
    if not sep:
        return name, None
    key, _, value = action.partition("=")
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if key != "sleep" or not seconds >= 0:
        raise ValueError(f"{ENV}={setting!r}: after the point's name, only ':sleep=SECONDS' is understood (e.g. {name}:sleep=2)")
    return name, seconds


def failpoint(name: str) -> None:
    """Die at once, or sleep, when MODELCD_FAILPOINT names this point."""
    if name not in POINTS:
        raise ValueError(f"unknown failpoint {name!r}; known: {', '.join(POINTS)}")
    setting = os.environ.get(ENV)
    if not setting:
        return
    point, seconds = _action(setting)
    if point != name:
        return
    if seconds is None:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(seconds)
