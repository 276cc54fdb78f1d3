"""The demo's policy files: each loads, and its rollout section is one its task can judge (shadow, then canary, then promote,
every metric named one of the task's live metrics), as the candidate asset requires before anything is gated."""

from __future__ import annotations

import pytest

from modelcd_assets.lib.judging.live_analysis import refuse_foreign_rollout
from modelcd_assets.lib.judging.policy import load_policy
from modelcd_assets.lib.judging.rollout_policy import CANARY, PROMOTE, SHADOW
from modelcd_assets.lib.tasks.names import CAUSAL_LM, CLASSIFICATION


@pytest.mark.parametrize("task", [CLASSIFICATION, CAUSAL_LM])
def test_a_demo_policy_rolls_out_through_shadow_and_canary(task, tmp_path):
    from modelcd_assets.demo.causal_lm import LM_POLICY
    from modelcd_assets.demo.classifier import POLICY

    path = tmp_path / "policy.yaml"
    path.write_text({CLASSIFICATION: POLICY, CAUSAL_LM: LM_POLICY}[task])
    policy = load_policy(path)
    assert [s.kind for s in policy.rollout.steps] == [SHADOW, CANARY, PROMOTE]
    refuse_foreign_rollout(task, policy.rollout, str(path))
    assert policy.serving.poll_seconds == 1
