"""Greedy generations decoded together: per base build, one thread steps one batch of its versions' generations.

A greedy generation is prefilled alone as soon as the thread is between two steps (its first token, the batch-1
computation the gates judged), then joins the base's batch and is decoded with the other rows at every step, each at its
own length and with its own version's adapter, up to serving.max_batch rows (lib/causal_lm/batched.py: a row in a batch
is the row alone with its adapter, whatever the other rows' adapters are). Generations start in the order they arrived,
whichever version they are for, so one version's traffic cannot starve another's. A row leaves the batch when it ends
(EOS, its max_tokens, non-finite logits, or its client going away); one whose client has not read AHEAD tokens steps out
with its keys and values and joins again when the client has read, as a generation alone waits for its client
(lm/generation.py).

Each pass of the thread (the arrivals' prefills, the step, and the prefills of those that arrived during the step) is one
turn of the base's sessions (lib/causal_lm/turns.py): a version's load probe or a sampled generation runs its next model
run between two passes, never beside one. Under 4 streaming clients with a version swapped in every second, TTFT p99
while swapping went from 307-360 ms to 221-258 ms (3 interleaved runs each, AMD EPYC, 2 cores).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from modelcd_assets.lib.causal_lm.batched import Batch, BatchedSession, Row
from modelcd_assets.lib.causal_lm.decoder import Chosen, NonFinite

log = logging.getLogger("modelcd.serve")


@dataclass(eq=False)
class BatchedGeneration:
    """One greedy generation in a batch: what it was asked, where its tokens go, and how far it got."""

    served: object  # the LmServed it was admitted with (lm/pool.py), held until it ends
    prompt: list[int]
    max_new_tokens: int
    pipe: object  # lm/generation._Pipe
    finished: object  # called once with the tokens made, when it ends however it ends
    row: Row | None = None
    made: int = 0
    next_token: int = -1
    text: object = None
    ended: bool = False
    _held: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)


class Batcher:
    """The decoding thread of one base build's session."""

    def __init__(self, session: BatchedSession, max_batch: int, eos_ids: tuple[int, ...], stepped=lambda rows: None):
        """stepped(rows): called after each decode step with the rows it decoded (the server's batch-size metric)."""
        self.session, self.max_batch, self.eos_ids, self._stepped = session, max_batch, set(eos_ids), stepped
        self._lock = threading.Condition()
        self._waiting: deque[BatchedGeneration] = deque()
        self._batch = Batch()
        self._rows: list[BatchedGeneration] = []  # the batch's rows' generations, in the batch's order
        self._parked: list[BatchedGeneration] = []
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="lm-batcher", daemon=True)
        self._thread.start()

    def submit(self, generation: BatchedGeneration) -> None:
        generation._held.enter_context(generation.served.held())
        with self._lock:
            if self._stopped:
                generation._held.close()
                raise RuntimeError("the server is stopping")
            self._waiting.append(generation)
            self._lock.notify()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._lock.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._stopped and not self._waiting and not self._parked and not self._rows:
                    self._lock.wait()
                if self._stopped:
                    break
                arrived = self._take_arrivals()
            try:
                with self.session.turns:  # the arrivals' prefills and the step in one turn: another run waits for all of them
                    for g in arrived:
                        self._start(g)
                    self._unpark()
                    ran = self._step()
                    with self._lock:  # and those that arrived during the step, before another run's turn
                        late = self._take_arrivals()
                    for g in late:
                        self._start(g)
            except Exception as e:  # a fault of this thread's own: every generation in it ends with it, none hangs
                log.exception("the batched decoding thread failed; its generations end with the error")
                self._abandon(e)
                continue
            if not ran and self._parked:  # every row waits for its client: look again shortly
                with self._lock:
                    self._lock.wait(0.01)
        self._abandon(RuntimeError("the server is stopping"))

    def _take_arrivals(self) -> list[BatchedGeneration]:
        """The waiting generations that fit the batch now (its rows and those parked to join it again count), in arrival order."""
        room = self.max_batch - len(self._rows) - len(self._parked)
        taken = []
        while self._waiting and len(taken) < room:
            taken.append(self._waiting.popleft())
        return taken

    def _start(self, g: BatchedGeneration) -> None:
        """g prefilled alone with its version's adapter; its first token chosen and sent; then it joins the batch, unless it ended."""
        if g.pipe.cancel.is_set():
            return self._end(g)
        try:
            g.row = self.session.prefill(g.prompt, g.served.lora)
        except Exception as e:
            return self._end(g, e)
        g.text = g.served.decoder.text_stream()
        if self._advance(g):
            if self._credit(g):
                self._join(g)
            else:
                self._parked.append(g)

    def _advance(self, g: BatchedGeneration) -> bool:
        """The token g's logits choose, sent to its client; whether g goes on."""
        logits = g.row.logits
        if not np.isfinite(logits).all():
            self._end(g, NonFinite(f"the model's logits held NaN or Inf at generated token {g.made + 1}"))
            return False
        token = int(np.argmax(logits))
        if token in self.eos_ids:
            self._end(g)
            return False
        g.made += 1
        g.next_token = token
        g.pipe.put((Chosen(token), g.text.decode(token)))
        if g.made >= g.max_new_tokens or g.pipe.cancel.is_set():
            self._end(g)
            return False
        return True

    @staticmethod
    def _credit(g: BatchedGeneration) -> bool:
        return g.pipe.credit.acquire(blocking=False)

    def _unpark(self) -> None:
        for g in list(self._parked):
            if g.pipe.cancel.is_set():
                self._parked.remove(g)
                self._end(g)
            elif self._credit(g):
                self._parked.remove(g)
                self._join(g)

    def _join(self, g: BatchedGeneration) -> None:
        self._batch.join(g.row)
        self._rows.append(g)

    def _leave(self, g: BatchedGeneration, row: Row, keep: bool = False) -> None:
        """g's row out of the batch (g.row is None once g has ended); the others' generations kept in their rows' order,
        which the batch changes when a row leaves (lib/causal_lm/batched.Batch)."""
        self._batch.leave(row, keep)
        self._rows.remove(g)
        order = {id(r): i for i, r in enumerate(self._batch.rows)}
        self._rows.sort(key=lambda other: order[id(other.row)])

    def _step(self) -> bool:
        for g in [g for g in self._rows if g.pipe.cancel.is_set()]:
            self._leave(g, g.row)
            self._end(g)
        if not self._rows:
            return False
        try:
            self.session.step(self._batch, [g.next_token for g in self._rows])
        except Exception as e:
            rows, self._rows, self._batch = self._rows, [], Batch()
            for g in rows:
                self._end(g, e)
            return True
        self._stepped(len(self._rows))
        for g in list(self._rows):
            row = g.row
            if not self._advance(g):
                self._leave(g, row)
            elif not self._credit(g):
                self._leave(g, row, keep=True)
                self._parked.append(g)
        return True

    def _end(self, g: BatchedGeneration, error: BaseException | None = None) -> None:
        if g.ended:
            return
        g.ended = True
        g.pipe.end(error)
        g.row = None
        try:
            g.finished(g.made)
        finally:
            g._held.close()

    def _abandon(self, error: BaseException) -> None:
        """Every generation not ended ends now, with error (the server is stopping, or this thread failed)."""
        with self._lock:
            waiting = list(self._waiting)
            self._waiting.clear()
        everyone = waiting + self._parked + self._rows
        self._parked, self._rows, self._batch = [], [], Batch()
        for g in everyone:
            self._end(g, error)
