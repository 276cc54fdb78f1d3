"""The batched decoding thread (serving/lm/batching.py) with a scripted session: what each generation's client receives,
that every generation ends exactly once however it ends, and that a fault of the thread ends its generations instead of
leaving them waiting."""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np
import pytest

from modelcd_assets.lib.causal_lm.batched import Row
from modelcd_assets.lib.causal_lm.decoder import NonFinite
from modelcd_assets.lib.causal_lm.turns import Turns
from modelcd_assets.serving.lm.batching import BatchedGeneration, Batcher

EOS, VOCAB = 0, 8


class Pipe:
    def __init__(self, credit: int = 1000):
        self.items, self.cancel, self.credit = [], threading.Event(), threading.Semaphore(credit)
        self.done = threading.Event()

    def put(self, item) -> None:
        self.items.append(item)

    def end(self, error=None) -> None:
        self.items.append(error if error is not None else "END")
        self.done.set()


class Script:
    """A session whose rows count up from their prompt's first id: row logits peak at (start + tokens made) % VOCAB, and at
    EOS once a row has made its prompt's second id of tokens; step raises when told to."""

    def __init__(self, fail_at_step: int | None = None, nan_at: int | None = None, delay_s: float = 0.0):
        self.steps, self.widest, self.fail_at, self.nan_at, self.delay_s = 0, 0, fail_at_step, nan_at, delay_s
        self.most_adapters = 0  # the most distinct adapters one step decoded with
        self.turns = Turns()

    def _logits(self, row: Row) -> np.ndarray:
        made = row.length - row.prompt_length
        out = np.zeros(VOCAB, np.float32)
        out[EOS if made >= row.stop_after else 1 + (row.start + made) % (VOCAB - 1)] = 1.0
        if self.nan_at is not None and made == self.nan_at:
            out[3] = np.nan
        return out

    def prefill(self, prompt, adapter) -> Row:
        assert self.turns.mine, "a prefill ran outside the batching thread's turn"
        row = Row(len(prompt), np.zeros(VOCAB, np.float32), [np.zeros((1, 1, len(prompt), 1), np.float32)], adapter)
        row.prompt_length, row.start, row.stop_after = len(prompt), prompt[0], prompt[1]
        row.logits = self._logits(row)
        return row

    def step(self, batch, tokens) -> None:
        assert self.turns.mine, "a step ran outside the batching thread's turn"
        time.sleep(self.delay_s)  # a step's work, so that rows overlap in time as they do in a server
        self.steps += 1
        self.widest = max(self.widest, len(batch.rows))
        self.most_adapters = max(self.most_adapters, len({id(r.adapter) for r in batch.rows}))
        if self.fail_at is not None and self.steps >= self.fail_at:
            raise RuntimeError("the session failed")
        # Each row's token is the one its own logits chose, in the batch's order (which changes when a row leaves).
        assert list(tokens) == [int(np.argmax(r.logits)) for r in batch.rows], (tokens, [r.start for r in batch.rows])
        for row in batch.rows:
            row.length += 1
            row.logits = self._logits(row)
        batch.kv = [np.zeros((len(batch.rows), 1, max(r.length for r in batch.rows), 1), np.float32)]


class Served:
    def __init__(self):
        self.lora, self.holders = object(), 0
        self.decoder = type("D", (), {"text_stream": lambda self: type("T", (), {"decode": lambda self, t: f"<{t}>"})()})()

    @contextlib.contextmanager
    def held(self):
        self.holders += 1
        try:
            yield self
        finally:
            self.holders -= 1


def run(batcher: Batcher, asks: list[tuple[list[int], int, Pipe]], served: Served) -> list[int]:
    finished: list[int] = []
    for prompt, max_new, pipe in asks:
        batcher.submit(BatchedGeneration(served, prompt, max_new, pipe, finished.append))
    deadline = time.monotonic() + 30
    while not all(p.done.is_set() for _, _, p in asks) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(p.done.is_set() for _, _, p in asks), "a generation never ended"
    return finished


def test_each_client_receives_its_own_rows_tokens_up_to_eos_or_its_max_tokens():
    script, served = Script(), Served()
    batcher = Batcher(script, max_batch=8, eos_ids=(EOS,))
    asks = [([1, 5], 100, Pipe()), ([3, 9], 4, Pipe()), ([2, 2], 100, Pipe())]
    try:
        finished = run(batcher, asks, served)
    finally:
        batcher.stop()
    tokens = [[c.token for c, _ in p.items[:-1]] for _, _, p in asks]
    assert tokens == [[2, 3, 4, 5, 6], [4, 5, 6, 7], [3, 4]]  # EOS after 5 and 2 tokens; 4 tokens at most for the second
    assert all(p.items[-1] == "END" for _, _, p in asks) and sorted(finished) == [2, 4, 5]
    assert script.widest == 3 and served.holders == 0


def test_rows_that_end_before_later_rows_leave_each_client_its_own_tokens():
    """The batch gives a leaving row's slot to its last row, so its order changes; each step's tokens still follow it."""
    script, served = Script(delay_s=0.002), Served()
    batcher = Batcher(script, max_batch=8, eos_ids=(EOS,))
    asks = [([1, 2], 100, Pipe()), ([4, 3], 100, Pipe()), ([7, 6], 100, Pipe()), ([5, 8], 100, Pipe())]
    try:
        run(batcher, asks, served)
    finally:
        batcher.stop()
    assert [[c.token for c, _ in p.items[:-1]] for _, _, p in asks] == [[2, 3], [5, 6, 7], [1, 2, 3, 4, 5, 6], [6, 7, 1, 2, 3, 4, 5, 6]]
    assert all(p.items[-1] == "END" for _, _, p in asks) and script.widest == 4 and served.holders == 0


def test_non_finite_logits_end_that_generation_alone():
    script, served = Script(nan_at=2), Served()
    batcher = Batcher(script, max_batch=8, eos_ids=(EOS,))
    asks = [([1, 6], 100, Pipe())]
    try:
        run(batcher, asks, served)
    finally:
        batcher.stop()
    assert [c.token for c, _ in asks[0][2].items[:-1]] == [2, 3] and isinstance(asks[0][2].items[-1], NonFinite)


def test_a_fault_of_the_thread_ends_every_generation_in_it_once_and_the_thread_goes_on():
    script, served = Script(fail_at_step=2), Served()
    batcher = Batcher(script, max_batch=8, eos_ids=(EOS,))
    asks = [([1, 50], 100, Pipe()), ([2, 50], 100, Pipe())]
    try:
        finished = run(batcher, asks, served)
        assert all(isinstance(p.items[-1], RuntimeError) for _, _, p in asks) and len(finished) == 2
        script.fail_at = None
        later = [([1, 3], 100, Pipe())]
        run(batcher, later, served)  # the thread still serves
        assert later[0][2].items[-1] == "END"
    finally:
        batcher.stop()
    assert served.holders == 0


def test_a_client_that_reads_nothing_holds_back_only_its_own_row():
    script, served = Script(), Served()
    batcher = Batcher(script, max_batch=8, eos_ids=(EOS,))
    slow, fast = Pipe(credit=2), Pipe()
    try:
        batcher.submit(BatchedGeneration(served, [1, 40], 100, slow, lambda made: None))
        run(batcher, [([2, 30], 100, fast)], served)
        assert len(fast.items) == 31 and len(slow.items) == 3 and not slow.done.is_set()  # 3 sent, 2 credits taken
        for _ in range(100):
            slow.credit.release()
        deadline = time.monotonic() + 30
        while not slow.done.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert slow.done.is_set() and [c.token for c, _ in slow.items[:-1]] == [1 + (1 + k) % 7 for k in range(40)]
    finally:
        batcher.stop()


@pytest.mark.parametrize("cancel_after", [0, 3])
def test_a_cancelled_generation_ends_and_gives_its_version_back(cancel_after):
    script, served = Script(), Served()
    batcher = Batcher(script, max_batch=8, eos_ids=(EOS,))
    pipe = Pipe(credit=cancel_after)
    try:
        batcher.submit(BatchedGeneration(served, [1, 90], 100, pipe, lambda made: None))
        time.sleep(0.05)
        pipe.cancel.set()
        deadline = time.monotonic() + 30
        while not pipe.done.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pipe.done.is_set() and pipe.items[-1] == "END"
    finally:
        batcher.stop()
    assert served.holders == 0


def test_a_batch_never_holds_more_rows_than_max_batch_its_parked_rows_counted():
    script, served = Script(delay_s=0.002), Served()
    batcher = Batcher(script, max_batch=2, eos_ids=(EOS,))
    # The first row parks after 4 tokens (its client reads nothing more), while the others run 60 tokens each.
    asks = [([1, 60], 100, Pipe(credit=3))] + [([k, 60], 100, Pipe()) for k in range(2, 6)]
    try:
        for prompt, max_new, pipe in asks:
            batcher.submit(BatchedGeneration(served, prompt, max_new, pipe, lambda made: None))
        deadline = time.monotonic() + 30
        # Parked (its 4th token sent, no credit for it), and a third row admitted: beside the first's place, or after the second ended.
        while not (len(asks[0][2].items) >= 4 and asks[2][2].items) and time.monotonic() < deadline:
            time.sleep(0.001)
        asks[0][2].credit.release(100)  # it joins again
        run(batcher, [], served)
        while not all(p.done.is_set() for _, _, p in asks) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        batcher.stop()
    assert all(p.items[-1] == "END" and len(p.items) == 61 for _, _, p in asks)  # 60 tokens each, then the end
    assert script.widest == 2


def test_versions_of_one_base_share_the_batch_each_row_with_its_own_adapter_in_arrival_order():
    script, first, second = Script(delay_s=0.002), Served(), Served()
    batcher = Batcher(script, max_batch=3, eos_ids=(EOS,))
    asks = [(first if k % 2 else second, [k, 20], Pipe()) for k in range(1, 7)]
    try:
        for served, prompt, pipe in asks:
            batcher.submit(BatchedGeneration(served, prompt, 100, pipe, lambda made: None))
        deadline = time.monotonic() + 30
        while not all(p.done.is_set() for _, _, p in asks) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        batcher.stop()
    for _, prompt, pipe in asks:  # each client its own row's tokens, whichever version's rows it decoded beside
        assert [c.token for c, _ in pipe.items[:-1]] == [1 + (prompt[0] + k) % 7 for k in range(20)] and pipe.items[-1] == "END"
    assert script.widest == 3 and script.most_adapters == 2  # one batch of both versions, never more than max_batch rows
    assert first.holders == second.holders == 0


def test_a_generation_that_arrives_during_a_step_is_prefilled_before_another_sessions_run_that_waits():
    """A pass of the thread is one turn of the base's sessions: the prefill of a generation that arrived while the batch
    stepped comes before a load probe's run that asked for its turn meanwhile, and no probe run lands inside a pass."""
    events: list[str] = []
    served = Served()

    class Probed(Script):
        def prefill(self, prompt, adapter) -> Row:
            events.append(f"prefill {prompt[0]}")
            return super().prefill(prompt, adapter)

        def step(self, batch, tokens) -> None:
            super().step(batch, tokens)
            events.append("step")
            if self.steps == 3:  # a probe asks for its turn, then a generation arrives, both while this step runs
                probe.start()
                deadline = time.monotonic() + 30
                while self.turns.waiting < 1:
                    assert time.monotonic() < deadline, "the probe never asked for its turn"
                    time.sleep(0.001)
                batcher.submit(BatchedGeneration(served, [5, 3], 100, late, lambda made: None))

    def probe_run() -> None:
        with script.turns:
            events.append("probe")

    script, first, late = Probed(), Pipe(), Pipe()
    probe = threading.Thread(target=probe_run)
    batcher = Batcher(script, max_batch=8, eos_ids=(EOS,))
    try:
        batcher.submit(BatchedGeneration(served, [1, 6], 100, first, lambda made: None))
        deadline = time.monotonic() + 30
        while not (first.done.is_set() and late.done.is_set()) and time.monotonic() < deadline:
            time.sleep(0.01)
        probe.join(30)
    finally:
        batcher.stop()
    assert first.done.is_set() and late.done.is_set() and not probe.is_alive()
    third = [i for i, e in enumerate(events) if e == "step"][2]
    assert events[third + 1 : third + 3] == ["prefill 5", "probe"], events
