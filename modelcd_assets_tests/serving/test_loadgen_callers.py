"""The load generator's callers ask the same mix of prompts: a canary's arm is a set of callers, so a caller tied to a
subset of the prompts made the two arms answer different prompts. CI measured it: an identical LM adapter, rolled out on
the 200 prompts of the tiny sandbox's traffic to 40 callers, paused at its canary step on eos_share (631 answers an arm),
since each arm's callers asked 100 prompts of their own."""

from __future__ import annotations

from collections import Counter

import pytest

from modelcd_assets.serving.loadgen import request_plan, run_load
from modelcd_assets.serving.rollout import bucket

PROMPTS, CALLERS, REQUESTS = 200, 40, 20_000


def _arm_prompts(plan) -> dict[bool, Counter]:
    """How often each prompt was asked in each arm of a 50% canary (True: the candidate's)."""
    arms = {True: Counter(), False: Counter()}
    for _, batch, caller in plan:
        arms[bucket("tiny-reply", caller) < 0.5][batch] += 1
    return arms


def test_both_arms_of_a_canary_ask_every_prompt_about_as_often():
    arms = _arm_prompts(request_plan(REQUESTS, PROMPTS, CALLERS))
    for arm, asked in arms.items():
        assert set(asked) == set(range(PROMPTS)), f"arm {arm} never asked {sorted(set(range(PROMPTS)) - set(asked))[:10]}"
    # Each prompt's share of an arm's requests is near 1/200 in both arms (binomial noise: a few tenths of it).
    n = {arm: sum(asked.values()) for arm, asked in arms.items()}
    for prompt in range(PROMPTS):
        shares = [arms[arm][prompt] / n[arm] for arm in (True, False)]
        assert abs(shares[0] - shares[1]) < 0.6 / PROMPTS, f"prompt {prompt}: {shares[0]:.4f} of one arm, {shares[1]:.4f} of the other"


def test_every_request_is_asked_once_in_order_and_callers_are_named_only_when_asked_for():
    plan = list(request_plan(500, 7, 3))
    assert [i for i, _, _ in plan] == list(range(500))
    assert [b for _, b, _ in plan] == [i % 7 for i in range(500)]
    assert {c for _, _, c in plan} == {"caller-0", "caller-1", "caller-2"}
    assert plan == list(request_plan(500, 7, 3)), "the plan is the same on every run (seeded)"
    assert {c for _, _, c in request_plan(50, 7, 0)} == {None}


def test_a_load_without_requests_to_send_is_refused_by_name():
    with pytest.raises(ValueError, match="no batches to send"):
        run_load("http://127.0.0.1:9", [], 1, 1)
