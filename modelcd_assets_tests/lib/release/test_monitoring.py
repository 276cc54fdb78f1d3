"""The monitoring loop: a model that could not be checked is inconclusive, never a pass, and an unexpected error propagates."""

import numpy as np
import pytest

from modelcd_assets.lib.judging.gates import INCONCLUSIVE, PASS, Verdict
from modelcd_assets.lib.release.monitoring import judge_each, recorded
from modelcd_assets.lib.release.registry import CandidateRef

PRODUCTIONS = {"a": CandidateRef("a", "3"), "b": CandidateRef("b", "1")}


def judge(model, prod):
    if model == "b":
        raise FileNotFoundError("no build here")
    return Verdict("g", PASS, "1.0", "0.5", "fine", {"ratio": np.float32(1.0)})


def test_a_model_that_could_not_be_checked_is_inconclusive_and_the_others_are_judged():
    logged, seen = [], []
    verdicts = judge_each(
        PRODUCTIONS,
        judge,
        gate="g",
        not_done="not judged",
        unable="could not check",
        errors=(FileNotFoundError,),
        log=logged.append,
        then=lambda model, prod, v: seen.append((model, v.status)),
    )
    assert verdicts["a"].status == PASS
    assert (verdicts["b"].status, verdicts["b"].measured, verdicts["b"].reason) == (
        INCONCLUSIVE,
        "not judged",
        "could not check models:/b/1: no build here",
    )
    assert seen == [("a", PASS), ("b", INCONCLUSIVE)] and logged == [
        "a v3: pass: fine",
        "b v1: inconclusive: could not check models:/b/1: no build here",
    ]


def test_an_error_it_was_not_told_to_expect_propagates():
    with pytest.raises(FileNotFoundError):
        judge_each(PRODUCTIONS, judge, gate="g", not_done="-", unable="-", errors=(ValueError,), log=lambda _: None)


def test_recorded_verdicts_are_plain_json_with_the_version():
    verdicts = judge_each({"a": PRODUCTIONS["a"]}, judge, gate="g", not_done="-", unable="-", errors=(), log=lambda _: None)
    assert recorded(PRODUCTIONS, verdicts) == {
        "a": {
            "version": "3",
            "gate": "g",
            "status": PASS,
            "measured": "1.0",
            "threshold": "0.5",
            "reason": "fine",
            "numbers": {"ratio": 1.0},
        }
    }
