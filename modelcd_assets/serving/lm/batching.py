"""Greedy generations decoded together: per base build, one thread steps each version's batch in turn.

A greedy generation is prefilled alone as soon as the thread is between two steps (its first token, the batch-1
computation the gates judged), then joins its version's batch and is decoded with the other rows of that version at every
step, each at its own length, up to serving.max_batch rows (lib/causal_lm/batched.py: a row in a batch is the row alone,
to the bit). Versions of one base share the thread and its session, and take turns: one step of each version's batch in
turn, so one version's traffic cannot starve another's. A row leaves its batch when it ends (EOS, its max_tokens, non-finite
logits, or its client going away); one whose client has not read AHEAD tokens steps out with its keys and values and joins
again when the client has read, as a generation alone waits for its client (lm/generation.py).
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
        self._batches: dict[object, tuple[Batch, list[BatchedGeneration]]] = {}  # per LmServed: its batch and its rows' generations
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
                while not self._stopped and not self._waiting and not self._parked and not self._batches:
                    self._lock.wait()
                if self._stopped:
                    break
                arrived = self._take_arrivals()
            try:
                for g in arrived:
                    self._start(g)
                self._unpark()
                ran = False
                for served in list(self._batches):
                    ran = self._step(served) or ran
            except Exception as e:  # a fault of this thread's own: every generation in it ends with it, none hangs
                log.exception("the batched decoding thread failed; its generations end with the error")
                self._abandon(e)
                continue
            if not ran and self._parked:  # every row waits for its client: look again shortly
                with self._lock:
                    self._lock.wait(0.01)
        self._abandon(RuntimeError("the server is stopping"))

    def _rows_of(self, served) -> int:
        """The rows a version holds: in its batch, and parked to join it again."""
        batch = self._batches.get(served)
        return (len(batch[1]) if batch else 0) + sum(g.served is served for g in self._parked)

    def _take_arrivals(self) -> list[BatchedGeneration]:
        """The waiting generations that fit their version's batch now, in arrival order."""
        taken, kept = [], deque()
        for g in self._waiting:
            if self._rows_of(g.served) + sum(t.served is g.served for t in taken) < self.max_batch:
                taken.append(g)
            else:
                kept.append(g)
        self._waiting = kept
        return taken

    def _start(self, g: BatchedGeneration) -> None:
        """g prefilled alone; its first token chosen and sent; then it joins its version's batch, unless it ended."""
        if g.pipe.cancel.is_set():
            return self._end(g)
        try:
            g.row = self.session.prefill(g.prompt, g.served.lora)
        except Exception as e:
            return self._end(g, e)
        g.text = g.served.decoder.text_stream()
        if self._advance(g):
            batch, rows = self._batches.setdefault(g.served, (Batch(), []))
            if self._credit(g):
                batch.join(g.row)
                rows.append(g)
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
                batch, rows = self._batches.setdefault(g.served, (Batch(), []))
                batch.join(g.row)
                rows.append(g)

    def _step(self, served) -> bool:
        batch, rows = self._batches[served]
        for g in [g for g in rows if g.pipe.cancel.is_set()]:
            batch.leave(g.row)
            rows.remove(g)
            self._end(g)
        if not rows:
            del self._batches[served]
            return False
        try:
            self.session.step(batch, [g.next_token for g in rows], served.lora)
        except Exception as e:
            for g in rows:
                self._end(g, e)
            del self._batches[served]
            return True
        self._stepped(len(rows))
        for g in list(rows):
            row = g.row
            if not self._advance(g):
                batch.leave(row)
                rows.remove(g)
            elif not self._credit(g):
                batch.leave(row, keep=True)
                rows.remove(g)
                self._parked.append(g)
        if not rows:
            del self._batches[served]
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
        everyone = waiting + self._parked + [g for _, rows in self._batches.values() for g in rows]
        self._parked.clear()
        self._batches.clear()
        for g in everyone:
            self._end(g, error)
