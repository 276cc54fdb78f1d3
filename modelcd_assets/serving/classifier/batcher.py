"""Micro-batching: texts of concurrent requests for one version are coalesced into one model call.

A batch closes when it holds max_batch texts or when its first request has waited max_wait_ms; while no
other batch of this version is running it closes at once, since nothing would be gained by waiting: a lone
request is never delayed, and under load requests gather while earlier batches run. A request larger than
max_batch is run alone (still in length buckets). Every request's texts go to one batch of
one version, so each response is served entirely by one version. At most `parallel` batches run at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor

import numpy as np


class MicroBatcher:
    def __init__(self, run: Callable[[list[str]], np.ndarray], executor: Executor, max_batch: int, max_wait_ms: float, parallel: int):
        self._run, self._executor = run, executor
        self.max_batch, self.max_wait = max_batch, max_wait_ms / 1000
        self._pending: list[tuple[list[str], asyncio.Future]] = []
        self._slots = asyncio.Semaphore(parallel)
        self._full = asyncio.Event()
        self._collector: asyncio.Task | None = None
        self.batches = 0  # model calls made, for tests and metrics
        self._running = 0

    def _queued(self) -> int:
        return sum(len(texts) for texts, _ in self._pending)

    async def submit(self, texts: list[str]) -> np.ndarray:
        """Logits of texts, computed in some batch with other requests' texts."""
        future = asyncio.get_running_loop().create_future()
        self._pending.append((list(texts), future))
        if self._queued() >= self.max_batch:
            self._full.set()
        if self._collector is None or self._collector.done():
            self._collector = asyncio.create_task(self._collect())
        return await future

    async def _collect(self) -> None:
        while self._pending:
            await self._slots.acquire()  # wait for a free slot first: requests keep joining meanwhile
            if self._running and self._queued() < self.max_batch and self.max_wait > 0:
                try:
                    await asyncio.wait_for(self._full.wait(), self.max_wait)
                except asyncio.TimeoutError:
                    pass
            self._full.clear()
            batch, size = [], 0
            while self._pending and (not batch or size + len(self._pending[0][0]) <= self.max_batch):
                texts, future = self._pending.pop(0)
                batch.append((texts, future))
                size += len(texts)
            if self._queued() >= self.max_batch:
                self._full.set()
            self._running += 1
            asyncio.create_task(self._call(batch))

    async def _call(self, batch: list[tuple[list[str], asyncio.Future]]) -> None:
        try:
            texts = [t for request, _ in batch for t in request]
            self.batches += 1
            try:
                out = await asyncio.get_running_loop().run_in_executor(self._executor, self._run, texts)
            except Exception as e:  # every request of the batch is answered with the failure
                for _, future in batch:
                    if not future.done():
                        future.set_exception(e)
                return
            start = 0
            for request, future in batch:
                if not future.done():
                    future.set_result(out[start : start + len(request)])
                start += len(request)
        finally:
            self._running -= 1
            self._slots.release()
