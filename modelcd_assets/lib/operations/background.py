"""Calls run in a spawned process of their own, one after another, at the lowest CPU priority, their output written to a log
instead of the terminal: what `modelcd demo` builds ahead of its turn (lib/tasks/names.TaskDeclaration.demo_head_start)."""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.tasks.names import load_declared


def _to_log(log: str) -> None:
    """The process writes its progress bars and warnings to the log, not between the parent's lines, and runs at the lowest
    CPU priority: on what the parent leaves idle. At the parent's priority it halved the speed of a 2-thread torch training
    beside it (its threads wait for each other's turn on 2 cores), for as long as both ran."""
    os.nice(19)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)


def _timed(spec: str, what: str, args: tuple) -> float:
    started = time.perf_counter()
    load_declared(spec, what)(*args)
    return time.perf_counter() - started


class Background:
    """Calls by "package.module:function", in one spawned process (a fork of a parent that holds torch's or gRPC's threads
    is not safe), started when the first is submitted. result() waits for one: a call that raised, or a process that died,
    is raised again as a ModelcdError naming the call and the log."""

    def __init__(self, log: Path) -> None:
        self.log = Path(log)
        self._pool: ProcessPoolExecutor | None = None
        self._calls: dict[str, tuple[str, Future]] = {}

    def submit(self, key: str, spec: str, what: str, *args) -> None:
        if self._pool is None:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            ctx = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(1, mp_context=ctx, initializer=_to_log, initargs=(str(self.log),))
        self._calls[key] = (what, self._pool.submit(_timed, spec, what, args))

    def __contains__(self, key: str) -> bool:
        return key in self._calls

    def result(self, key: str) -> float:
        """The call's own seconds, once it is done."""
        what, future = self._calls[key]
        try:
            return future.result()
        except Exception as e:
            raise ModelcdError(f"{what} failed in the background: {type(e).__name__}: {e}; see {self.log}") from e

    def close(self) -> None:
        """Calls not yet started are cancelled; the one running is waited for."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
