"""Choosing the rollback target: the previous-production chain first, skipping rolled-back and ungated versions."""

import pytest

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.release.registry import PROMOTION, ROLLED_BACK
from modelcd_assets.lib.release.rollback import roll_back, rollback_order, rollback_target
from modelcd_assets_tests.conftest import TEST_LOCK


@pytest.fixture
def history(modelcd_env, tiny_base):
    reg = modelcd_env.registry
    refs = [reg.register(tiny_base, "intent-r") for _ in range(4)]
    for ref in (refs[0], refs[2], refs[1], refs[3]):  # production went 1 -> 3 -> 2 -> 4
        reg.move_production(ref, {"test": True}, expected=reg.production(ref.name), lock=TEST_LOCK)
    return reg, refs


def test_the_chain_of_previous_production_versions_comes_first(history):
    reg, refs = history
    assert [r.version for r in rollback_order(reg, refs[3])] == ["2", "3", "1"]


def test_rolled_back_and_ungated_versions_are_passed_over(history):
    reg, refs = history
    reg.set_tags(refs[1], {ROLLED_BACK: "{}"})
    target, passed_over = rollback_target(reg, refs[3], lambda ref: ["accuracy_within_tolerance: failed"] if ref.version == "3" else [])
    assert target.version == "1"
    assert passed_over == {"2": "production was rolled back from it before", "3": "accuracy_within_tolerance: failed"}
    roll_back(reg, refs[3], target, {"why": "p99"}, TEST_LOCK)
    assert reg.production("intent-r") == target and "p99" in reg.tags(refs[3])[ROLLED_BACK]
    assert '"rollback_from": "4"' in reg.tags(target)[PROMOTION]


def test_nowhere_to_go_is_a_clear_error(history):
    reg, refs = history
    with pytest.raises(ModelcdError, match="no earlier version of intent-r passed its gates .*fix forward"):
        rollback_target(reg, refs[3], lambda ref: ["never gated"])
