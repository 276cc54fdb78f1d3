"""Micro-batching: concurrent requests are coalesced up to max_batch texts, each answered with its own rows."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from modelcd_assets.serving.classifier.batcher import MicroBatcher


class Model:
    """Logits that name their text, so a row given to the wrong request shows; calls are recorded."""

    def __init__(self, delay: float = 0.0, fail_on: str | None = None):
        self.calls: list[list[str]] = []
        self.delay, self.fail_on = delay, fail_on
        self.lock = threading.Lock()

    def __call__(self, texts: list[str]) -> np.ndarray:
        with self.lock:
            self.calls.append(list(texts))
        time.sleep(self.delay)
        if self.fail_on in texts:
            raise RuntimeError(f"model failed on {self.fail_on}")
        return np.array([[float(t.split("-")[0]), float(t.split("-")[1])] for t in texts])


def run(model: Model, requests: list[list[str]], max_batch: int, max_wait_ms: float, parallel: int = 1, stagger: float = 0.0):
    async def main():
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            batcher = MicroBatcher(model, pool, max_batch, max_wait_ms, parallel)

            async def one(i, texts):
                await asyncio.sleep(stagger * i)
                return await batcher.submit(texts)

            return await asyncio.gather(*(one(i, r) for i, r in enumerate(requests)), return_exceptions=True)

    return asyncio.run(main())


def texts_of(request: int, n: int) -> list[str]:
    return [f"{request}-{j}" for j in range(n)]


def test_concurrent_requests_share_calls_and_each_gets_its_own_rows():
    requests = [texts_of(i, 1 + i % 3) for i in range(40)]
    model = Model(delay=0.01)
    results = run(model, requests, max_batch=16, max_wait_ms=5)
    for i, (texts, out) in enumerate(zip(requests, results)):
        assert out.shape == (len(texts), 2) and (out[:, 0] == i).all() and list(out[:, 1]) == list(range(len(texts)))
    assert len(model.calls) < len(requests) / 3  # coalesced
    assert all(len(c) <= 16 for c in model.calls)
    # A request's texts are never split across calls: each response comes from one model call.
    for texts in requests:
        assert sum(set(texts) <= set(c) for c in model.calls) == 1


def test_a_request_larger_than_max_batch_runs_alone():
    model = Model()
    big, small = texts_of(0, 40), texts_of(1, 2)
    out = run(model, [big, small], max_batch=8, max_wait_ms=1)
    assert out[0].shape == (40, 2) and out[1].shape == (2, 2)
    assert big in model.calls and small in model.calls


def test_a_lone_request_does_not_wait_for_company():
    model = Model()
    t = time.perf_counter()
    run(model, [texts_of(0, 1)], max_batch=32, max_wait_ms=5000)
    assert model.calls == [["0-0"]] and time.perf_counter() - t < 1.0


def test_requests_arriving_while_a_batch_runs_wait_to_share_the_next_call():
    model = Model(delay=0.05)
    requests = [texts_of(i, 1) for i in range(6)]
    run(model, requests, max_batch=32, max_wait_ms=200, stagger=0.01)  # the first runs alone; the rest gather behind it
    assert model.calls[0] == ["0-0"] and len(model.calls) == 2 and sorted(model.calls[1]) == sorted(t for r in requests[1:] for t in r)


def test_a_failed_call_answers_every_request_in_it_with_the_error_and_spares_the_others():
    model = Model(delay=0.01, fail_on="3-0")
    requests = [texts_of(i, 1) for i in range(8)]
    results = run(model, requests, max_batch=2, max_wait_ms=5)
    failed = {i for i, r in enumerate(results) if isinstance(r, RuntimeError)}
    partner = next(c for c in model.calls if "3-0" in c)
    assert failed == {int(t.split("-")[0]) for t in partner}
    assert all(isinstance(r, np.ndarray) for i, r in enumerate(results) if i not in failed)


@pytest.mark.parametrize("parallel", [1, 3])
def test_no_more_than_parallel_calls_run_at_once(parallel):
    running, peak, lock = 0, 0, threading.Lock()

    def model(texts):
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02)
        with lock:
            running -= 1
        return np.zeros((len(texts), 2))

    run(model, [texts_of(i, 1) for i in range(30)], max_batch=2, max_wait_ms=0, parallel=parallel)
    assert peak == parallel
