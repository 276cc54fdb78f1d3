"""What share of the node's time each request used: the node's time, divided equally among the requests in flight.

A clock that runs 1/n seconds a second while n requests are in flight, and stands still while none is. A request is charged
what the clock ran between its admission and its answer, so the charges of every request add up to the time the node was
busy, however many ran at once (a micro-batch of 8 costs each of its requests an eighth). Priced at the policy's
cost.node_usd_per_hour, that is what a request cost, the quantity the offline cost gate computes as node cost over
throughput, measured per request on live traffic (serving/accounting.RequestAccount).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class NodeShare:
    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self._clock = clock
        self._lock = threading.Lock()
        self._in_flight = 0
        self._shared = 0.0  # what one request in flight since the start would have been charged
        self._at = clock()

    def _advance(self) -> None:
        now = self._clock()
        if self._in_flight:
            self._shared += (now - self._at) / self._in_flight
        self._at = now

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def enter(self) -> float:
        """A request is in flight from now on; what it gets back is handed to leave() when it is answered."""
        with self._lock:
            self._advance()
            self._in_flight += 1
            return self._shared

    def leave(self, entered: float) -> float:
        """The request that entered at `entered` is answered: its share of the node's time since then, in seconds."""
        with self._lock:
            if not self._in_flight:
                raise RuntimeError("a request left the node's clock that never entered it, or left it twice")
            self._advance()
            self._in_flight -= 1
            return self._shared - entered
