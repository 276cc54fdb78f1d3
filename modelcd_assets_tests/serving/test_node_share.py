"""The node's time shared among the requests in flight: what each request is charged, and that the charges add up to the
time the node was busy."""

import pytest

from modelcd_assets.serving.node_share import NodeShare


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_request_alone_is_charged_its_time_and_two_at_once_share_it():
    clock = Clock()
    share = NodeShare(clock)
    a = share.enter()  # t=100: A alone
    clock.now = 101.0
    b = share.enter()  # t=101: A and B share the node
    clock.now = 103.0
    assert share.leave(a) == pytest.approx(1.0 + 2.0 / 2)
    clock.now = 105.0
    assert share.leave(b) == pytest.approx(2.0 / 2 + 2.0)
    assert share.in_flight == 0


def test_the_charges_add_up_to_the_busy_time_and_idle_time_is_nobodys():
    clock = Clock()
    share = NodeShare(clock)
    clock.now = 110.0  # idle since 100: charged to nobody
    entered = []
    for _ in range(8):  # a micro-batch of 8 that takes 0.8 s
        entered.append(share.enter())
    clock.now = 110.8
    charges = [share.leave(e) for e in entered]
    assert charges == pytest.approx([0.1] * 8)
    clock.now = 120.0
    late = share.enter()
    clock.now = 120.5
    assert share.leave(late) == pytest.approx(0.5)
    assert sum(charges) + 0.5 == pytest.approx(0.8 + 0.5)


def test_leaving_without_entering_is_refused_by_name():
    share = NodeShare(Clock())
    with pytest.raises(RuntimeError, match="never entered it, or left it twice"):
        share.leave(0.0)
