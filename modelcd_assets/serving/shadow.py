"""Shadow copies: a request production answered, sent again to the rollout's candidate off the request path, its answer
compared with production's and never returned.

At most `capacity` copies run at once; a copy beyond them is dropped and counted (modelcd_shadow_dropped_total), never
queued, so on a saturated server shadowing costs production nothing but the copies already running. Each pair is
counted (modelcd_shadow_pairs_total, modelcd_shadow_agreements_total and each task's paired histograms, under the
candidate's version) and kept in the model's bounded 0600 paired sample (traffic/<model>/shadow/), for a person to read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from modelcd_assets.lib.operations.traffic_log import SHADOW_PAIRS, TrafficLog
from modelcd_assets.serving.metrics import Metrics

log = logging.getLogger("modelcd.serve")
PAIRS_KEPT = 2000  # shadowed pairs the paired sample keeps, newest first
PAIRS_MAX_BYTES = 16 * 2**20


class ShadowLane:
    def __init__(self, state_root, model: str, metrics: Metrics, capacity: int):
        self.model, self.metrics, self.capacity = model, metrics, capacity
        self.pairs = TrafficLog(state_root, model, 1.0, PAIRS_KEPT, max_bytes=PAIRS_MAX_BYTES, part=SHADOW_PAIRS)
        self.in_flight = 0
        self._tasks: set[asyncio.Task] = set()
        self._failed = False
        metrics.shadow_dropped.labels(model)

    def offer(self, copy: Callable[[], Awaitable[dict | None]]) -> bool:
        """Run copy() in the background when there is room, else drop it (counted). copy returns the pair's record to keep."""
        if self.in_flight >= self.capacity:
            self.metrics.shadow_dropped.labels(self.model).inc()
            return False
        self.in_flight += 1
        task = asyncio.get_running_loop().create_task(self._run(copy))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _run(self, copy: Callable[[], Awaitable[dict | None]]) -> None:
        try:
            record = await copy()
            if record is not None:
                await asyncio.get_running_loop().run_in_executor(None, self.pairs.append_records, [record])
        except Exception:  # a shadow copy's failure is the candidate's, counted by the copy; never the request's
            if not self._failed:
                self._failed = True
                log.exception("a shadow copy to %s's candidate failed", self.model)
        finally:
            self.in_flight -= 1

    async def drain(self) -> None:
        """Wait for the copies in flight (tests, and a clean shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self.pairs.close()
