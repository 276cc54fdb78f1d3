"""A rollout's moves: which a state allows, what each step's analysis calls for, and a move written only over the state it
was decided on (a real SQLite registry)."""

from __future__ import annotations

import pytest

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.live_analysis import FAIL, HIGH, INCONCLUSIVE, NODATA, PASS, MetricJudgement, StepAnalysis
from modelcd_assets.lib.judging.rollout_policy import RolloutPolicy
from modelcd_assets.lib.release.alias_lock import FileAliasLock
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.release.rollout import (
    ABORT,
    ADVANCE,
    FINISH,
    PAUSE,
    PROMOTE_AGAIN,
    RESUME,
    RolloutHistory,
    RolloutMoved,
    decide,
    moved,
    read_state,
    started,
    write_state,
)
from modelcd_assets.lib.release.rollout_state import ABORTED, PAUSED, PROMOTED, RUNNING
from modelcd_assets.lib.release.signing import Keys
from modelcd_assets_tests.conftest import make_env

POLICY = RolloutPolicy.model_validate({"steps": [{"shadow": 0.2, "for": "10s"}, {"canary": 0.1, "for": "20s"}, "promote"]})
REF = CandidateRef("m", "4")


def analysis(outcome: str, critical_failure: bool = False, wants_samples: bool = False) -> StepAnalysis:
    metrics = []
    if critical_failure:
        metrics.append(MetricJudgement("error_rate", "rate", HIGH, True, 1.0, {}, {}, {}, "10/200 against 0/200"))
    if wants_samples:
        metrics.append(MetricJudgement("error_rate", "rate", NODATA, True, 1.0, {}, {}, {}, "0/40 against 0/40: not bounded"))
    return StepAnalysis(outcome, 100.0 if outcome == PASS else 0.0, ["said"], metrics)


def test_a_rollout_walks_its_steps_and_ends_promoted():
    s = started(REF, "3", POLICY, "ab", None)
    assert (s.step, s.kind, s.share, s.status, s.sequence, s.against) == (0, "shadow", 0.2, RUNNING, 0, "3")
    s = moved(s, ADVANCE, POLICY, "pass")
    assert (s.step, s.kind, s.share, s.sequence) == (1, "canary", 0.1, 1)
    s = moved(s, ADVANCE, POLICY, "pass")
    assert (s.kind, s.serving_share) == ("promote", 0.0)
    assert moved(s, PROMOTE_AGAIN, POLICY, "again") is s  # nothing moves; production_model runs again
    done = moved(s, FINISH, POLICY, "promoted")
    assert done.status == PROMOTED and done.sequence == s.sequence + 1
    with pytest.raises(ModelcdError, match="cannot advance"):
        moved(done, ADVANCE, POLICY, "")
    again = started(REF, "3", POLICY, "ab", done)
    assert again.sequence == done.sequence + 1  # a new rollout's first state is newer than every earlier one


def test_pause_resume_abort_and_what_is_refused():
    s = started(REF, "3", POLICY, "ab", None)
    paused = moved(s, PAUSE, POLICY, "no data")
    assert paused.status == PAUSED and paused.serving_share == 0.2
    resumed = moved(paused, RESUME, POLICY, "by hand")
    assert resumed.status == RUNNING and resumed.since == paused.since  # the step goes on with what it gathered
    aborted = moved(resumed, ABORT, POLICY, "errors")
    assert aborted.status == ABORTED and aborted.serving_share == 0
    with pytest.raises(ModelcdError, match="cannot resume"):
        moved(s, RESUME, POLICY, "")
    with pytest.raises(ModelcdError, match="cannot pause"):
        moved(aborted, PAUSE, POLICY, "")
    with pytest.raises(ModelcdError, match="not at its promote step"):
        moved(s, FINISH, POLICY, "")
    with pytest.raises(ModelcdError, match="not a rollout move"):
        moved(s, "skip", POLICY, "")


def test_what_a_step_analysis_calls_for():
    s = started(REF, "3", POLICY, "ab", None)
    early, late = s.since + 5, s.since + 11
    assert decide(s, 10, analysis(PASS), now=early).action is None
    assert decide(s, 10, analysis(FAIL), now=early).action is None  # a non-critical failure waits for the step's end
    assert decide(s, 10, analysis(FAIL, critical_failure=True), now=early).action == ABORT  # at once
    assert decide(s, 10, analysis(PASS), now=late).action == ADVANCE
    assert decide(s, 10, analysis(FAIL), now=late).action == ABORT
    assert decide(s, 10, analysis(INCONCLUSIVE), now=late).action == PAUSE


def test_a_step_wanting_samples_goes_on_up_to_its_max_for_then_pauses():
    s = started(REF, "3", POLICY, "ab", None)
    wanting = analysis(INCONCLUSIVE, wants_samples=True)
    going = decide(s, 10, wanting, now=s.since + 11, max_seconds=60)
    assert going.action is None and "up to 60 s: gathering samples" in going.reason, going
    assert decide(s, 10, analysis(PASS), now=s.since + 30, max_seconds=60).action == ADVANCE  # a verdict ends it
    assert decide(s, 10, wanting, now=s.since + 61, max_seconds=60).action == PAUSE
    assert decide(s, 10, wanting, now=s.since + 11).action == PAUSE  # no max_for: paused at its end
    # A marginal score is no want of samples: more of them would not change what failed.
    assert decide(s, 10, analysis(INCONCLUSIVE), now=s.since + 11, max_seconds=60).action == PAUSE
    assert decide(s, 10, analysis(FAIL), now=s.since + 11, max_seconds=60).action == ABORT


def test_a_move_is_written_only_over_the_state_it_was_decided_on(tmp_path, monkeypatch):
    env = make_env(tmp_path / "home", monkeypatch)
    reg = env.registry
    reg.client.create_registered_model("m")
    keys, lock = Keys.from_env(env.env), FileAliasLock(tmp_path / "alias-locks")
    first = started(REF, "3", POLICY, "ab", None)
    write_state(reg, first, None, keys.private, lock)
    assert read_state(reg, "m") == first
    with pytest.raises(RolloutMoved, match="moved \\(state 0, not None\\)"):
        write_state(reg, started(REF, "3", POLICY, "ab", None), None, keys.private, lock)
    nxt = moved(first, ADVANCE, POLICY, "pass")
    write_state(reg, nxt, 0, keys.private, lock)
    with pytest.raises(RolloutMoved):  # a second decision on the old state changes nothing
        write_state(reg, moved(first, ABORT, POLICY, "late"), 0, keys.private, lock)
    assert read_state(reg, "m") == nxt


def test_the_history_keeps_each_step_in_order(tmp_path):
    h = RolloutHistory(tmp_path, "m", "4")
    assert h.read() == []
    h.append({"step": 0, "action": "advance"})
    h.append({"step": 1, "action": "abort"})
    assert [e["action"] for e in h.read()] == ["advance", "abort"]
    h.restart()
    assert h.read() == []


def test_a_first_version_and_a_regated_production_take_no_rollout():
    from modelcd_assets.lib.release.candidate import CandidateRecord

    policy = {"rollout": POLICY.model_dump(mode="json", by_alias=True)}
    fields = dict(name="m", version="4", kind="adapter", content_hash="c", artifact_dir="a", build_dir="b", candidate_dir="d")
    later = CandidateRecord(**fields, production_version="3", policy=policy)
    assert later.rollout() == POLICY and later.no_rollout_because() == ""
    first = CandidateRecord(**fields, policy=policy)
    assert first.rollout() is None and "first version" in first.no_rollout_because()
    regated = CandidateRecord(**fields, production_version="3", regated_production=True, policy=policy)
    assert regated.rollout() is None and "production already" in regated.no_rollout_because()
    plain = CandidateRecord(**fields, production_version="3")
    assert plain.rollout() is None and "no rollout section" in plain.no_rollout_because()
