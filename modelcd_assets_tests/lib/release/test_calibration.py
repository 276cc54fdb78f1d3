"""Calibration set validation and storage: each rule refuses a set that breaks it, with the reason, and lets a good one through."""

from __future__ import annotations

import json

import numpy as np
import pytest

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.hashing import file_sha256
from modelcd_assets.lib.judging.policy import CalibrationPolicy
from modelcd_assets.lib.release.calibration import BadCalibrationSet, CalibrationStore, inline_texts, jsonl, read_texts, validate


def words(texts):
    """Lengths in words plus two special tokens: enough to test the rule without a tokenizer."""
    return np.array([len(t.split()) + 2 for t in texts])


EVALUATION = [f"ticket {i} about my invoice that was charged twice again" for i in range(100)]  # 12 "tokens" each
GOOD = [f"message {i} about a parcel that never arrived at home" for i in range(200)]  # 12 too, none in EVALUATION
POLICY = CalibrationPolicy(min_examples=200, max_median_length_ratio=3.0)


def test_a_representative_set_passes_and_reports_what_was_measured():
    summary = validate(GOOD, EVALUATION, words, POLICY)
    assert (summary.examples, summary.median_tokens, summary.evaluation_median_tokens, summary.length_ratio) == (200, 12, 12, 1.0)


@pytest.mark.parametrize(
    "texts, reason",
    [
        (GOOD[:199], "it holds 199 texts, fewer than calibration.min_examples (200)"),
        (
            ["short"] * 200,
            "its median length is 3 tokens against the evaluation split's 12; calibration.max_median_length_ratio allows 4.0 to 36.0",
        ),
        ([" ".join(["long"] * 40)] * 200, "its median length is 42 tokens against the evaluation split's 12"),
        (GOOD[:199] + ["  Ticket 5 ABOUT my invoice that was charged  twice again "], "1 of its texts are in the evaluation split"),
    ],
)
def test_each_rule_refuses_a_set_that_breaks_it(texts, reason):
    with pytest.raises(BadCalibrationSet, match="the current set stays") as e:
        validate(texts, EVALUATION, words, POLICY, source="new.jsonl")
    assert reason in str(e.value)
    assert str(e.value).startswith("new.jsonl was refused")


def test_the_length_bounds_are_inclusive_at_the_ratio():
    at_third = ["a b"] * 200  # 4 tokens: 12 / 3 exactly
    assert validate(at_third, EVALUATION, words, POLICY).median_tokens == 4
    with pytest.raises(BadCalibrationSet, match="median length is 3 tokens"):
        validate(["a"] * 200, EVALUATION, words, POLICY)
    at_triple = [" ".join(["w"] * 34)] * 200  # 36 tokens: 12 x 3 exactly
    assert validate(at_triple, EVALUATION, words, POLICY).median_tokens == 36
    with pytest.raises(BadCalibrationSet, match="median length is 37 tokens"):
        validate([" ".join(["w"] * 35)] * 200, EVALUATION, words, POLICY)


def test_every_problem_is_named_at_once():
    with pytest.raises(BadCalibrationSet) as e:
        validate(EVALUATION[:10], EVALUATION, words, POLICY)
    assert "fewer than calibration.min_examples" in str(e.value) and "10 of its texts are in the evaluation split" in str(e.value)


def test_read_texts_takes_text_lines_and_names_every_bad_line(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"text": "a"}) + "\n\n" + json.dumps({"text": "b", "label": "billing"}) + "\n")
    assert read_texts(good) == ["a", "b"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        "not json\n"
        + json.dumps({"label": "x"})
        + "\n"
        + json.dumps({"text": "  "})
        + "\n"
        + json.dumps(["text"])
        + "\n"
        + json.dumps({"text": 3})
        + "\n"
    )
    with pytest.raises(BadCalibrationSet) as e:
        read_texts(bad)
    message = str(e.value)
    assert "line 1 is not JSON" in message and "line 2 has no non-empty string" in message and "line 3 has no" in message
    assert "(and 2 more lines)" in message
    with pytest.raises(BadCalibrationSet, match="does not exist"):
        read_texts(tmp_path / "missing.jsonl")


def test_the_store_keeps_a_set_under_its_hash_and_refuses_a_changed_or_missing_one(tmp_path):
    src = tmp_path / "set.jsonl"
    src.write_text(json.dumps({"text": "a"}) + "\n")
    store = CalibrationStore(tmp_path / "store")
    digest = store.save(src)
    assert digest == file_sha256(src) and store.require(digest).read_text() == src.read_text()
    src.write_text(json.dumps({"text": "b"}) + "\n")
    assert store.require(digest).read_text() == json.dumps({"text": "a"}) + "\n"  # a frozen copy, not the user's file
    store.path(digest).write_text("tampered\n")
    with pytest.raises(ModelcdError, match="no longer matches its hash"):
        store.require(digest)
    with pytest.raises(ModelcdError, match="register it again"):
        store.require("0" * 64)


def test_a_set_beyond_the_policys_bounds_is_refused_with_the_bound():
    bounded = CalibrationPolicy(min_examples=200, max_examples=250, max_text_chars=60)
    assert validate(GOOD + GOOD[:50], EVALUATION, words, bounded).examples == 250
    with pytest.raises(BadCalibrationSet) as e:
        validate(GOOD + GOOD[:51], EVALUATION, words, bounded)
    assert "it holds 251 texts, more than calibration.max_examples (250)" in str(e.value)
    with pytest.raises(BadCalibrationSet) as e:
        validate(GOOD[:199] + ["x " * 31], EVALUATION, words, bounded)
    assert "1 of its texts are longer than calibration.max_text_chars (60; first: text 199, 62 characters)" in str(e.value)


def test_inline_texts_are_stored_as_the_file_they_would_be_and_an_empty_one_is_refused(tmp_path):
    store = CalibrationStore(tmp_path / "sets")
    path = tmp_path / "set.jsonl"
    path.write_bytes(jsonl(GOOD))
    assert read_texts(path) == GOOD
    digest = store.save_texts(inline_texts(GOOD))
    assert digest == file_sha256(path) == store.save(path) and read_texts(store.require(digest)) == GOOD
    with pytest.raises(BadCalibrationSet) as e:
        inline_texts(["fine", " ", 3, ""])
    assert "texts[1] is not a non-empty string; texts[2] is not a non-empty string; texts[3]" in str(e.value)
    assert "the current set stays" in str(e.value)
