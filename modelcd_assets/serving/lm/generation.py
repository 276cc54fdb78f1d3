"""Generations in flight: admission by the serving policy's bounds, each one on a thread of its own, its tokens handed
to the request's event loop as they come, and stopped (its KV cache freed) when the client goes away.

Admission checks a generation's bounds before a token is generated, as serving/rejections.py decides them: the prompt
and max_tokens against the policy and the model's context, the KV cache the generation preallocates, and the number of
generations at once.

A rollout's shadow copy is a background generation: it never takes a caller's place among serving.max_generations, and it
generates each token (its prefill the first) only while fewer of the callers' generations than
serving.shadow_below_generations run. Every generation uses all the cores, so a copy beside as many callers' generations
as there are cores slowed them (make bench-rollout: production's p99 1.43x with a 0.2 shadow on 2 cores, 2 callers). A
copy that waited serving.shadow_max_wait_s in all stops with Yielded: dropped, never an answer or an error of its version.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from modelcd_assets.lib.causal_lm.decoder import Chosen, Sampling, cores
from modelcd_assets.lib.judging.policy import ServingPolicy
from modelcd_assets.serving.lm.batching import BatchedGeneration, Batcher
from modelcd_assets.serving.lm.pool import LmServed
from modelcd_assets.serving.metrics import LmServerMetrics
from modelcd_assets.serving.rejections import check_generations, generation_bounds

AHEAD = 16  # tokens a generation may run ahead of what its client has been sent
_END = object()


class Yielded(Exception):
    """A shadow copy that waited for room beside the callers' generations longer than serving.shadow_max_wait_s."""


@dataclass(frozen=True)
class Admitted:
    max_new_tokens: int
    kv_bytes: int
    background: bool = False  # a shadow copy's


class Generations:
    def __init__(self, model: str, policy: ServingPolicy, metrics: LmServerMetrics):
        self.model, self.policy, self.metrics = model, policy, metrics
        self.executor = ThreadPoolExecutor(
            max_workers=policy.max_generations + policy.max_shadow_in_flight, thread_name_prefix="generation"
        )
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # notified when a caller's generation ends
        self.running, self.callers, self.kv_bytes = 0, 0, 0  # callers: the running generations that are not shadow copies
        self.background_below = policy.shadow_below_generations or cores()
        self._busy_since: float | None = None
        self._busy_s, self._tokens = 0.0, 0
        self._batchers: dict[object, Batcher] = {}  # per base build (lm/pool.Base): its batches' decoding thread

    def admit(
        self, prompt_tokens: int, max_tokens: int | None, context_length: int, kv_bytes_per_token: int, background: bool = False
    ) -> Admitted:
        """The generation's bounds, or serving/rejections.Rejected (400, 413, 429) before anything runs: the caller's account
        counts it and the OpenAI router answers it, as every other rejection. A background generation (a shadow copy, which
        the shadow lane bounds) is not counted against serving.max_generations."""
        return self.admit_all([prompt_tokens], max_tokens, context_length, kv_bytes_per_token, background)[0]

    def admit_all(
        self,
        prompts_tokens: list[int],
        max_tokens: int | None,
        context_length: int,
        kv_bytes_per_token: int,
        background: bool = False,
        prompt_param: str = "messages",
        limit_param: str = "max_tokens",
    ) -> list[Admitted]:
        """One request's generations (its choices), each by admit()'s rules: all of them admitted at once, or none.
        prompt_param and limit_param: the request fields a prompt and a max_tokens beyond their bounds are named by."""
        bounds = [
            generation_bounds(self.policy, n, max_tokens, context_length, kv_bytes_per_token, prompt_param, limit_param)
            for n in prompts_tokens
        ]
        with self._lock:
            if not background:
                check_generations(self.callers + len(bounds) - 1, self.policy)
            for _, kv in bounds:
                self._started(kv, background)
        return [Admitted(new, kv, background) for new, kv in bounds]

    def wait_room(self, cancel: threading.Event, budget_s: float) -> float | None:
        """For a background generation's next token: wait until fewer callers' generations than background_below run, at most
        budget_s. The seconds it waited (past budget_s when there was no room in time); None when the generation was cancelled."""
        start = time.monotonic()
        with self._room:
            while self.callers >= self.background_below and not cancel.is_set():
                waited = time.monotonic() - start
                if waited > budget_s:
                    return waited
                self._room.wait(min(budget_s - waited, 0.1) + 1e-3)
        return None if cancel.is_set() else time.monotonic() - start

    def _started(self, kv: int, background: bool) -> None:
        if not self.running:
            self._busy_since = time.perf_counter()
        self.running += 1
        self.callers += 0 if background else 1
        self.kv_bytes += kv
        self._export()

    def _finished(self, admitted: Admitted, tokens: int) -> None:
        with self._lock:
            self.running -= 1
            if not admitted.background:
                self.callers -= 1
                self._room.notify_all()
            self.kv_bytes -= admitted.kv_bytes
            self._tokens += tokens
            if not self.running and self._busy_since is not None:
                self._busy_s += time.perf_counter() - self._busy_since
                self._busy_since = None
            self._export()
            if self._tokens and self._busy_s > 0:
                # the node's price (the metrics' own, which every request's cost is priced at) over busy tokens per second
                self.metrics.cost.labels(self.model).set(self.metrics.usd_per_second / (self._tokens / self._busy_s) * 1e6)

    def _export(self) -> None:
        self.metrics.kv_cache_bytes.labels(self.model).set(self.kv_bytes)
        self.metrics.generations.labels(self.model).set(self.running)

    def tokens(self, served: LmServed, prompt: list[int], admitted: Admitted, sampling: Sampling) -> TokenStream:
        """(Chosen, the text its token adds) as they are generated, started now; closing the stream early, or dropping it
        unread, stops the generation and frees its cache. A caller's plain greedy generation is decoded in its base's
        batch (lm/batching.py) when serving.max_batch allows more than one row; any other (sampled, biased, penalized,
        guided, with logprobs or a least number of tokens) and a shadow copy run alone, on ONNX Runtime GenAI's own
        generator."""
        batcher = self._batcher(served) if sampling.plain and not admitted.background else None
        if batcher is None:
            return TokenStream(self, admitted, lambda pipe: self.executor.submit(_produce, pipe, self, served, prompt, admitted, sampling))

        def start(pipe: _Pipe) -> None:
            batcher.submit(BatchedGeneration(served, prompt, admitted.max_new_tokens, pipe, lambda made: self._finished(admitted, made)))

        return TokenStream(self, admitted, start)

    def _batcher(self, served: LmServed) -> Batcher | None:
        if self.policy.max_batch < 2 or served.base.batched is None:
            return None
        with self._lock:
            batcher = self._batchers.get(served.base)
            if batcher is None:
                rows = self.metrics.batch_rows.labels(self.model)
                batcher = self._batchers[served.base] = Batcher(
                    served.base.batched, self.policy.max_batch, served.decoder.eos_ids, rows.observe
                )
            return batcher

    def close(self) -> None:
        with self._lock:
            for batcher in self._batchers.values():
                batcher.stop()
        self.executor.shutdown(wait=False, cancel_futures=True)


class _Pipe:
    """What a generation's thread and its stream share; the thread holds only this, so a stream dropped unread is collected."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.queue = loop, asyncio.Queue()
        self.cancel = threading.Event()
        self.credit = threading.Semaphore(AHEAD)  # a client that does not read holds its generation back, AHEAD tokens ahead

    def put(self, item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the event loop is gone (the server is stopping): nobody is waiting
            self.cancel.set()

    def end(self, error: BaseException | None = None) -> None:
        """The generation is over: to the end, or with error, which the request answers."""
        self.put(error if error is not None else _END)

    def wait_credit(self) -> bool:
        while not self.credit.acquire(timeout=0.1):
            if self.cancel.is_set():
                return False
        return True


def _produce(pipe: _Pipe, owner: Generations, served: LmServed, prompt: list[int], admitted: Admitted, sampling: Sampling) -> None:
    made, patience = 0, owner.policy.shadow_max_wait_s  # the seconds a shadow copy may still wait for room
    try:
        with served.held():
            text = served.decoder.text_stream()
            steps = served.decoder.stream(prompt, admitted.max_new_tokens, served.adapter, sampling)
            try:
                while True:
                    if admitted.background:
                        waited = owner.wait_room(pipe.cancel, patience)
                        if waited is None:
                            break
                        patience -= waited
                        if patience < 0:
                            raise Yielded(
                                f"a shadow copy waited {owner.policy.shadow_max_wait_s:g} s in all for fewer than"
                                f" {owner.background_below} callers' generations (serving.shadow_below_generations)"
                            )
                    step = next(steps, _END)
                    if step is _END:
                        break
                    made += 1
                    pipe.put((step, text.decode(step.token)))
                    if pipe.cancel.is_set() or not pipe.wait_credit():
                        break
            finally:
                steps.close()  # the generator, and the KV cache it holds, go now
        pipe.end()
    except BaseException as e:  # handed to the request, which answers it
        pipe.end(e)
    finally:
        owner._finished(admitted, made)


class TokenStream:
    """One generation on a thread of its own, its tokens handed to the event loop that started it.

    The admission it holds is given back when the generation ends, however it ends: to the end, stopped by aclose(), or
    abandoned (a response never sent: the stream is collected, which stops it)."""

    def __init__(self, owner: Generations, admitted: Admitted, start):
        self._pipe = pipe = _Pipe(asyncio.get_running_loop())
        try:
            start(pipe)
        except RuntimeError:  # shutting down: nothing will run
            owner._finished(admitted, 0)
            raise

    def __aiter__(self) -> TokenStream:
        return self

    async def __anext__(self) -> tuple[Chosen, str]:
        item = await self._pipe.queue.get()
        if item is _END:
            raise StopAsyncIteration
        self._pipe.credit.release()
        if isinstance(item, BaseException):
            raise item
        return item

    async def aclose(self) -> None:
        self._pipe.cancel.set()

    def __del__(self) -> None:
        self._pipe.cancel.set()
