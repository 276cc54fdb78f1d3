"""A rollout's signed state: who can have written it, what it says, and what a reader refuses."""

from __future__ import annotations

import base64
import json

import pytest

from modelcd_assets.lib.release.rollout_state import (
    ABORTED,
    CANARY,
    PAUSED,
    PROMOTE,
    RUNNING,
    SHADOW,
    RolloutState,
    sign_state,
    verify_state,
)
from modelcd_assets.lib.release.signing import BadSignature, Keys, init_keys, sign_envelope


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("k")
    return init_keys(Keys(root / "keys" / "signing.key", root / "signing.pub"))


@pytest.fixture(scope="module")
def other(tmp_path_factory):
    root = tmp_path_factory.mktemp("other")
    return init_keys(Keys(root / "o.key", root / "o.pub"))


def state(**kw) -> RolloutState:
    fields = dict(
        model="m",
        version="3",
        against="2",
        step=1,
        steps=3,
        kind=CANARY,
        share=0.05,
        status=RUNNING,
        since=1.0,
        sequence=4,
        policy_sha256="ab",
    )
    return RolloutState(**{**fields, **kw})


def test_a_state_round_trips_and_says_what_share_the_candidate_gets(keys):
    s = state()
    assert verify_state(sign_state(s, keys.private), keys.public, "m") == s
    assert s.serving_share == 0.05 and state(status=PAUSED).serving_share == 0.05  # a paused step keeps gathering evidence
    assert state(status=ABORTED).serving_share == 0 and state(kind=PROMOTE, share=0, step=2).serving_share == 0
    nxt = s.moved(step=2, kind=PROMOTE, share=0.0)
    assert nxt.sequence == 5 and nxt.since > s.since and nxt.version == "3"
    assert "m v3 running at step 2/3 (canary 0.05) against production v2" == s.describe()


def test_a_state_another_key_signed_or_anyone_altered_is_refused(keys, other):
    with pytest.raises(BadSignature, match="does not verify with the public key"):
        verify_state(sign_state(state(), other.private), keys.public, "m")
    envelope = sign_state(state(), keys.private)
    payload = json.loads(base64.b64decode(envelope["payload"]))
    payload["share"] = 0.9
    forged = {**envelope, "payload": base64.b64encode(json.dumps(payload).encode()).decode()}
    with pytest.raises(BadSignature, match="does not verify"):
        verify_state(forged, keys.public, "m")


def test_a_state_about_another_model_or_of_another_type_or_malformed_is_refused(keys):
    with pytest.raises(BadSignature, match="about m, not n"):
        verify_state(sign_state(state(), keys.private), keys.public, "n")
    from dataclasses import asdict

    with pytest.raises(BadSignature, match="not a modelcd rollout state"):
        verify_state(sign_envelope(asdict(state()), "application/vnd.in-toto+json", keys.private), keys.public, "m")
    bad = {**asdict(state()), "share": 1.0}  # a canary of everything
    with pytest.raises(BadSignature, match="malformed"):
        verify_state(sign_envelope(bad, "application/vnd.modelcd.rollout-state+json", keys.private), keys.public, "m")
    extra = {**asdict(state()), "weight": 1}
    with pytest.raises(BadSignature, match="malformed"):
        verify_state(sign_envelope(extra, "application/vnd.modelcd.rollout-state+json", keys.private), keys.public, "m")


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(kind="blue"), "shadow, canary or promote"),
        (dict(status="done"), "status is one of"),
        (dict(step=3), "not one of the rollout's 3 steps"),
        (dict(kind=SHADOW, share=1.5), "share must be in"),
    ],
)
def test_a_state_that_cannot_be_is_refused_when_made(fields, message):
    with pytest.raises(ValueError, match=message):
        state(**fields)
