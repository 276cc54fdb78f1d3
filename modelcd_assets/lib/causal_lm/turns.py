"""Turns: the runs of one base build's sessions, one at a time, in the order they asked.

A server holds two sessions on each base build (ONNX Runtime GenAI's decoder and the batched session), and each would
otherwise run on as many threads as the machine has cores whenever it is asked: a version's load probe beside the
serving batch, or a sampled generation beside it, then ran two sessions' threads on the same cores, each spinning for
work, and both took longer than one after the other. With turns, a run waits for the runs that asked before it and for
none that asked after, so neither a probe nor a steady stream of serving steps can starve the other: the serving
batch waits for at most the runs queued before its step.
"""

from __future__ import annotations

import threading
from collections import deque


class Turns:
    """A fair (first come, first served) lock: `with turns:` around each model run, or around several runs of one thread
    (which then run inside its turn). A run that is done hands the turn straight to the longest waiting one, so a thread
    that asks again at once queues behind it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._queue: deque[tuple[threading.Event, int]] = deque()
        self._owner: int | None = None  # the thread whose turn it is
        self._depth = 0  # how many times it entered

    def __enter__(self) -> Turns:
        me = threading.get_ident()
        with self._lock:
            if self._owner in (None, me):
                self._owner, self._depth = me, self._depth + 1
                return self
            mine = (threading.Event(), me)
            self._queue.append(mine)
        try:
            mine[0].wait()
        except BaseException:  # interrupted while waiting: out of the queue, or on with the turn it was handed meanwhile
            with self._lock:
                if mine in self._queue:
                    self._queue.remove(mine)
                    raise
            self._pass()
            raise
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            if self._owner != threading.get_ident():
                raise RuntimeError("a turn was given back by a thread that does not hold it")
            self._depth -= 1
            if self._depth:
                return
        self._pass()

    def _pass(self) -> None:
        with self._lock:
            if self._queue:  # the turn goes to the longest waiting thread directly, before any other can ask
                event, self._owner = self._queue.popleft()
                self._depth = 1
                event.set()
            else:
                self._owner, self._depth = None, 0

    @property
    def mine(self) -> bool:
        """Whether the calling thread holds the turn."""
        with self._lock:
            return self._owner == threading.get_ident()

    @property
    def waiting(self) -> int:
        """Runs waiting for their turn."""
        with self._lock:
            return len(self._queue)
