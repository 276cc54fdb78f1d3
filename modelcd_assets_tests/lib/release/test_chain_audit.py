"""The audit of a production chain against its promotion records and attestations: intact histories pass, every kind of
broken link is found and names its versions."""

from __future__ import annotations

import json

import pytest

from modelcd_assets.lib.release import attestation
from modelcd_assets.lib.release.chain_audit import audit
from modelcd_assets.lib.release.registry import PREVIOUS_PRODUCTION, PROMOTION, CandidateRef
from modelcd_assets.lib.release.rollback import roll_back
from modelcd_assets_tests.conftest import TEST_LOCK

SUBJECTS = ("registered-files", "int8-model", "tokenizer", "calibration-set")  # the classifier task's
DIGESTS = {name: "ab" * 32 for name in SUBJECTS}


def promote(reg, ref: CandidateRef, run_id: str = "", attest: bool = True, judged_against: str | None = "same") -> None:
    """What production_model does: a signed verdict judged against production, then the alias moved with the record."""
    current = reg.production(ref.name)
    against = current.version if current else None
    run_id = run_id or f"run-{ref.version}"
    if attest:
        verdict = attestation.Verdict(
            ref.name,
            ref.version,
            DIGESTS,
            [{"gate": "g", "verdict": "pass"}],
            {"version": against, attestation.REGISTERED_FILES: "cd" * 32} if against else None,
            "ef" * 32,
            run_id,
        )
        reg.put_attestation(ref, attestation.sign(verdict, reg.keys.require_private(), subjects=SUBJECTS))
    recorded = against if judged_against == "same" else judged_against
    reg.move_production(ref, {"run_id": run_id, "judged_against": recorded}, expected=current, lock=TEST_LOCK)


@pytest.fixture
def history(modelcd_env, tiny_base):
    """Versions 1..4 of m, 1 to 3 promoted in turn."""
    reg = modelcd_env.registry
    refs = [reg.register(tiny_base, "m") for _ in range(4)]
    for ref in refs[:3]:
        promote(reg, ref)
    return reg, refs


def test_a_history_of_promotions_is_intact(history):
    reg, _ = history
    found = audit(reg, "m")
    assert found.intact and found.chain == ("3", "2", "1") and found.production == "3" and not found.unseen, found
    assert found.shown == "m: 3 <- 2 <- 1: intact"


def test_a_previous_production_edited_by_hand_breaks_the_chain_and_names_the_versions(history):
    reg, refs = history
    reg.set_tags(refs[2], {PREVIOUS_PRODUCTION: "1"})
    found = audit(reg, "m")
    assert not found.intact and found.chain == ("3", "1")
    assert found.problems == (
        "3 was promoted judged against 2, but the alias moved to it from 1",
        "2 is tagged as promoted (modelcd.promotion) but is not in the chain from production: its move was overwritten",
    )


def test_a_race_that_overwrote_a_promotion_is_found(history, tiny_base):
    """What the promotion race left: 4 and 5 both judged against 3 and both moved; 5's compare read 3 before 4's set."""
    reg, refs = history
    five = reg.register(tiny_base, "m")
    promote(reg, refs[3])
    reg.client.set_registered_model_alias("m", "production", "3")  # what 5's compare saw, without the lock
    promote(reg, five)
    found = audit(reg, "m")
    assert found.chain == ("5", "3", "2", "1")
    assert found.problems == (
        "4 is tagged as promoted (modelcd.promotion) but is not in the chain from production: its move was overwritten",
    )


def test_an_alias_moved_by_hand_to_a_version_without_a_record_is_found(history):
    reg, refs = history
    reg.client.set_registered_model_alias("m", "production", refs[3].version)
    found = audit(reg, "m")
    assert found.chain == ("4",)
    assert found.problems[0] == "4 is in the chain but has no readable modelcd.promotion record: the alias was moved to it by hand"
    assert [p.split(" ")[0] for p in found.problems[1:]] == ["1", "2", "3"]  # each tagged as promoted, none in the chain


def test_a_promotion_without_an_attestation_or_with_another_run_is_found(modelcd_env, tiny_base):
    reg = modelcd_env.registry
    one, two, three = (reg.register(tiny_base, "m") for _ in range(3))
    promote(reg, one)
    promote(reg, two, attest=False)
    assert audit(reg, "m").problems == ("2 was promoted but has no attestation",)
    promote(reg, three)
    reg.set_tags(three, {PROMOTION: json.dumps({"run_id": "another-run", "judged_against": "2"})})
    assert audit(reg, "m").problems == (
        "3's attestation was written by run run-3, its promotion record by run another-run",
        "2 was promoted but has no attestation",
    )


def test_an_attestation_judged_against_another_version_is_found(history):
    reg, refs = history
    promote(reg, refs[3], judged_against="1")
    assert audit(reg, "m").problems[0] == "4 was promoted judged against 1, but the alias moved to it from 3"


def test_a_rollback_is_a_valid_link_and_the_history_it_overwrote_is_said_unseen(history):
    reg, refs = history
    roll_back(reg, refs[2], refs[1], {"why": "p99"}, TEST_LOCK)
    found = audit(reg, "m")
    assert found.intact and found.chain == ("2", "3"), found
    assert found.unseen == "the history before the rollback to 2 is not kept in the registry"
    reg.client.delete_model_version_tag("m", "3", "modelcd.rolled_back")
    assert audit(reg, "m").problems == ("2 was rolled back to from 3, which is not marked modelcd.rolled_back",)


def test_no_production_is_an_empty_intact_chain(modelcd_env, tiny_base):
    reg = modelcd_env.registry
    reg.register(tiny_base, "m")
    found = audit(reg, "m")
    assert found.intact and found.chain == () and found.production is None
