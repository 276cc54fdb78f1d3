"""How long a live class's rollout steps last in the fault sandbox: the policy's steps at the sandbox's length, or the
length asked for (--live-step-seconds), and said so in the report; a length that is not above 0 is refused by name."""

import pytest

from modelcd_assets.faults.live_faults import DEFAULT_STEP_SECONDS, MAX_FOR_STEPS, STEP_SECONDS, sandbox_rollout
from modelcd_assets.faults.sandbox import open_sandbox
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.rollout_policy import RolloutPolicy
from modelcd_assets.lib.tasks.names import CAUSAL_LM

POLICY = {"rollout": {"min_samples": 10, "steps": [{"shadow": 0.5, "for": "15s"}, {"canary": 0.5, "for": "10s"}, "promote"]}}


def _seconds(section: dict) -> list[float]:
    steps = RolloutPolicy.model_validate(section).judged_steps()
    assert [s.max_seconds for s in steps] == [MAX_FOR_STEPS * s.seconds for s in steps]  # each may go on for samples
    return [s.seconds for s in steps]


def test_the_policys_steps_take_the_sandboxs_length_or_the_one_asked_for():
    section, said = sandbox_rollout(POLICY, CAUSAL_LM)
    assert _seconds(section) == [STEP_SECONDS, STEP_SECONDS] and "(the policy's: 15s, 10s)" in said
    section, said = sandbox_rollout(POLICY, CAUSAL_LM, 60.0)
    assert _seconds(section) == [60.0, 60.0]
    assert said == "the live classes' steps were set to 60 s each, up to 240 s while a metric wants samples (the policy's: 15s, 10s)"
    longer = {"rollout": {"steps": [{"canary": 0.5, "for": "10s", "max_for": "1h"}, "promote"]}}
    assert "(the policy's: 10s up to 1h)" in sandbox_rollout(longer, CAUSAL_LM)[1]
    assert section["min_samples"] == 10  # the rest of the section is the policy's


def test_a_policy_without_a_rollout_takes_the_default_one_at_the_length_asked_for():
    section, said = sandbox_rollout({}, CAUSAL_LM)
    assert _seconds(section) == [DEFAULT_STEP_SECONDS, DEFAULT_STEP_SECONDS] and "default rollout" in said
    section, said = sandbox_rollout({}, CAUSAL_LM, 45.0)
    assert _seconds(section) == [45.0, 45.0] and said.endswith("its steps 45 s each")


@pytest.mark.parametrize("seconds", [0.0, -5.0])
def test_a_step_length_not_above_zero_is_refused_before_the_sandbox_is_built(tmp_path, seconds):
    with pytest.raises(ModelcdError, match=f"live step seconds {seconds!r} is not above 0"):
        with open_sandbox("any", {}, tmp_path, live_step_seconds=seconds):
            pass
    assert not any(tmp_path.iterdir())
