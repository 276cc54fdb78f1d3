"""The fault classes of files beside an adapter's weights (issue 27), in the sandbox on the tiny models: each tokenizer or config
file the base serves its own of is refused at register, or blocked by artifact_is_safe when uploaded without `modelcd register`;
the base's own files copied beside production's adapter, byte for byte, are promoted."""

from __future__ import annotations

import pytest

from modelcd_assets.faults.classifier_faults import CLASSES
from modelcd_assets.faults.lm_faults import CLASSES as LM_CLASSES
from modelcd_assets.faults.outcomes import PROMOTED
from modelcd_assets.faults.runner import run_selftest
from modelcd_assets_tests.conftest import TEST_LOCK, TINY_GATED_POLICY, make_env

pytestmark = pytest.mark.slow
FILE_CLASSES = [
    "adapter_added_tokens_file",
    "raw_adapter_added_tokens_file",
    "adapter_special_tokens_map_changed",
    "adapter_tokenizer_config_changed",
    "adapter_tokenizer_json_changed",
    "adapter_vocab_txt_edited",
    "adapter_config_json_changed",
]
LM_FILE_CLASSES = [
    "lm_added_special_token",
    "lm_chat_template_as_patch",
    "lm_eos_changed",
    "lm_added_tokens_file",
    "lm_special_tokens_map_eos",
    "lm_tokenizer_config_eos",
    "lm_tokenizer_config_chat_template",
    "lm_vocab_json_edited",
    "lm_merges_txt_edited",
    "lm_config_json_changed",
]


def _production(env, base, adapter, base_name, name):
    env.registry.register(base, base_name, role="base")
    prod = env.registry.register(adapter, name)
    env.registry.move_production(prod, {"test": "production before the sandbox"}, expected=None, lock=TEST_LOCK)
    return prod


def test_a_classifier_adapters_files_are_refused_unless_they_are_the_bases_own(tmp_path, monkeypatch, tiny_trained, tiny_adapters):
    assert set(FILE_CLASSES) <= {fc.name for fc in CLASSES}
    env = make_env(tmp_path / "home", monkeypatch)
    env.policy("tiny-intent", TINY_GATED_POLICY + "  pairs: 6\n  max_pairs: 6\n")
    prod = _production(env, tiny_trained, tiny_adapters["good"], "tiny-base", "tiny-intent")

    report = run_selftest(
        "tiny-intent", env.env, only=FILE_CLASSES, identical_controls=1, retrained_controls=0, under_load=False, root=tmp_path / "sandbox"
    )
    print(report.render())
    assert {r.name: f"{r.actual}: {r.actual.detail}" for r in report.classes if not r.ok} == {}
    assert (
        "the base has no added_tokens.json, and this one declares sku1, sku2, sku3"
        in {r.name: r.actual.detail for r in report.classes}["adapter_added_tokens_file"]
    )
    assert [(c.label, c.outcome.kind) for c in report.controls] == [("identical-1", PROMOTED), ("base-files", PROMOTED)], [
        c.outcome.detail for c in report.controls
    ]
    assert report.exit_code == 0 and env.registry.production("tiny-intent") == prod


def test_a_causal_lm_adapters_files_are_refused_unless_they_are_the_bases_own(tmp_path, monkeypatch, tiny_lm):
    from modelcd_assets_tests.tiny_lm import TINY_LM_POLICY

    assert set(LM_FILE_CLASSES) <= {fc.name for fc in LM_CLASSES}
    env = make_env(tmp_path / "home", monkeypatch)
    env.policy("tiny-reply", TINY_LM_POLICY)
    prod = _production(env, tiny_lm.base, tiny_lm.adapter, "tiny-lm-base", "tiny-reply")

    report = run_selftest(
        "tiny-reply", env.env, only=LM_FILE_CLASSES, identical_controls=1, retrained_controls=0, under_load=False, root=tmp_path / "sandbox"
    )
    print(report.render())
    assert {r.name: f"{r.actual}: {r.actual.detail}" for r in report.classes if not r.ok} == {}
    details = {r.name: r.actual.detail for r in report.classes}
    assert "the base has no added_tokens.json, and this one declares <|call|>, <|result|>, <|tool|>" in details["lm_added_tokens_file"]
    assert "differs from the base's copy in eos_token" in details["lm_tokenizer_config_eos"]
    assert "differs from the base's copy in chat_template" in details["lm_tokenizer_config_chat_template"]
    assert [(c.label, c.outcome.kind) for c in report.controls] == [
        ("identical-1", PROMOTED),
        ("lora-b-x1.001", PROMOTED),
        ("base-files", PROMOTED),
        ("bf16", PROMOTED),
        ("fp16", PROMOTED),
    ], [c.outcome.detail for c in report.controls]
    assert report.exit_code == 0 and env.registry.production("tiny-reply") == prod
