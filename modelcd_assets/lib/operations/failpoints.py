"""Named crash points for the crash-safety tests: MODELCD_FAILPOINT=NAME makes the process SIGKILL itself there."""

from __future__ import annotations

import os
import signal

ENV = "MODELCD_FAILPOINT"
# Every point the crash tests exercise, in the order a gated run (or a rollback) reaches them.
POINTS = ("mid_quantization", "before_promotion", "after_tags", "after_alias", "mid_rollback")


def failpoint(name: str) -> None:
    """Die at once, as a power cut or OOM kill would, when MODELCD_FAILPOINT names this point."""
    if name not in POINTS:
        raise ValueError(f"unknown failpoint {name!r}; known: {', '.join(POINTS)}")
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
