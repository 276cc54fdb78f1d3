"""Turns (lib/causal_lm/turns.py): runs go one at a time in the order they asked, a run that asks again queues behind
those waiting, and a waiter interrupted leaves no turn held."""

from __future__ import annotations

import threading
import time

import pytest

from modelcd_assets.lib.causal_lm import turns as turns_module
from modelcd_assets.lib.causal_lm.turns import Turns

DEADLINE_S = 30


def waiting_reaches(turns: Turns, n: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while turns.waiting < n:
        assert time.monotonic() < deadline, f"{turns.waiting} runs waiting, not {n}"
        time.sleep(0.005)


def test_runs_go_in_the_order_they_asked_and_one_that_asks_again_queues_behind_them():
    turns, order, threads = Turns(), [], []

    def run(name: str) -> None:
        with turns:
            order.append(name)

    with turns:  # the serving thread's step, while three others ask in turn
        for k, name in enumerate(["probe", "sampled", "probe again"]):
            threads.append(threading.Thread(target=run, args=(name,)))
            threads[-1].start()
            waiting_reaches(turns, k + 1)
        order.append("step")
    with turns:  # the serving thread asks again at once: it goes after every run that was waiting
        order.append("next step")
    for t in threads:
        t.join(DEADLINE_S)
    assert order == ["step", "probe", "sampled", "probe again", "next step"]
    assert turns.waiting == 0


def test_runs_never_overlap():
    turns, inside, most = Turns(), [0], [0]

    def run() -> None:
        for _ in range(200):
            with turns:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                time.sleep(0)
                inside[0] -= 1

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert most[0] == 1 and not any(t.is_alive() for t in threads)


@pytest.mark.parametrize("handed_the_turn_first", [False, True])
def test_a_waiter_interrupted_holds_no_turn(monkeypatch, handed_the_turn_first):
    """Interrupted while it waits, a run leaves the queue; if the turn was handed to it meanwhile, it passes it on."""
    turns, holding, release = Turns(), threading.Event(), threading.Event()

    def holder() -> None:  # another thread's run, going until released
        with turns:
            holding.set()
            release.wait(DEADLINE_S)

    other = threading.Thread(target=holder)
    other.start()
    assert holding.wait(DEADLINE_S)
    real_event = threading.Event

    class Interrupted(real_event):
        def wait(self, timeout=None):
            if handed_the_turn_first:  # the holder ends, handing the turn to this waiter, before the interrupt
                release.set()
                assert real_event.wait(self, DEADLINE_S)
            raise KeyboardInterrupt

    monkeypatch.setattr(turns_module.threading, "Event", Interrupted)
    with pytest.raises(KeyboardInterrupt):
        turns.__enter__()
    monkeypatch.undo()
    assert turns.waiting == 0
    release.set()
    other.join(DEADLINE_S)
    got = threading.Event()

    def later() -> None:
        with turns:
            got.set()

    threading.Thread(target=later, daemon=True).start()
    assert got.wait(DEADLINE_S), "a later run never got its turn"


def test_a_thread_holding_the_turn_runs_inside_it_and_others_wait_for_its_last_exit():
    turns, order = Turns(), []

    def run() -> None:
        with turns:
            order.append("other")

    with turns:  # the serving thread's whole iteration: its prefills and its step inside one turn
        other = threading.Thread(target=run)
        other.start()
        waiting_reaches(turns, 1)
        with turns:
            order.append("prefill")
        with turns:
            order.append("step")
    other.join(DEADLINE_S)
    assert order == ["prefill", "step", "other"]
