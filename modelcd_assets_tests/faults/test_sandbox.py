"""The fault sandbox on the tiny model: a subset covering every outcome kind, and two clean controls, against a copy of production;
the ways around a verdict (issue 17); a fault that is not reproducible on the model, counted apart.

The user's registry is only read: its production alias, its versions and the process environment are as they were.
"""

from __future__ import annotations

import os
import re

import pytest

from modelcd_assets.cli import main
from modelcd_assets.faults.outcomes import PROMOTED
from modelcd_assets.faults.runner import run_selftest
from modelcd_assets.lib.operations.settings import local_defaults
from modelcd_assets.lib.release.registry import Registry
from modelcd_assets_tests.conftest import TEST_LOCK, make_env

pytestmark = pytest.mark.slow
MODEL = "tiny-intent"
# As test_gated_pipeline.py's policy (dynamic INT8 pinned, a floor the tiny model clears); a throughput verdict
# left inconclusive by a busy 2-core machine does not block a control here, and six pairs keep each benchmark short.
POLICY = (
    "accuracy:\n  absolute_floor: 0.6\nquantization:\n  variant: dynamic\nthroughput:\n  p99_slo_ms: 250\n  pairs: 6\n  max_pairs: 6\n "
    " on_inconclusive: pass\n"
)
# One class of each outcome kind, plus a raw upload that only artifact_is_safe sees.
FAST = [
    "pickle_renamed",
    "tampered_after_registration",
    "raw_pickle_renamed",
    "nan_weights",
    "weight_scale_blowup",
    "adapter_targets_no_module",
    "registry_outage",
    "production_moved_mid_run",
    "prometheus_unreachable",
]


def tiny_production(tmp_path, monkeypatch, tiny_trained, tiny_adapters):
    """A state folder whose model has the tiny good adapter in production (never gated there), and that version."""
    env = make_env(tmp_path / "home", monkeypatch)
    env.policy(MODEL, POLICY)
    env.registry.register(tiny_trained, "tiny-base", role="base")
    prod = env.registry.register(tiny_adapters["good"], MODEL)
    env.registry.move_production(prod, {"test": "production before the sandbox"}, expected=None, lock=TEST_LOCK)
    return env, prod


def test_fast_subset_ends_as_expected_and_the_users_production_never_moves(tmp_path, monkeypatch, tiny_trained, tiny_adapters):
    env, prod = tiny_production(tmp_path, monkeypatch, tiny_trained, tiny_adapters)
    reg = env.registry

    report = run_selftest(MODEL, env.env, only=FAST, identical_controls=2, retrained_controls=0, under_load=True, root=tmp_path / "sandbox")
    print(report.render())

    assert sorted(r.name for r in report.classes) == sorted(FAST)
    assert {r.name: f"{r.actual}: {r.actual.detail}" for r in report.classes if not r.ok} == {}
    assert {str(r.expected).split(" gate ")[0] for r in report.classes} == {
        "refused at register",
        "manifest mismatch",
        "blocked by",
        "bad input",
        "superseded",
        "run failed, nothing promoted",
        "sensor skipped, nothing launched",
    }
    # Two byte-identical copies and the base's tokenizer and config files copied beside production's adapter; the first
    # of each kind gated first, beside the sandbox's server answering a load generator process until those gates had ended,
    # and the last byte-identical copy rolled out on live traffic to production (the policy has no rollout section: the
    # sandbox's default one).
    assert [(c.label, c.kind, c.outcome.kind, c.under_load) for c in report.controls] == [
        ("identical-1", "byte-identical", PROMOTED, True),
        ("base-files", "base's tokenizer and config files copied", PROMOTED, True),
        ("identical-2", "byte-identical, rolled out on live traffic", PROMOTED, False),
    ], [c.outcome.detail for c in report.controls]
    assert "through 2 steps on live traffic" in report.controls[-1].outcome.detail
    assert any("the fault sandbox's default rollout" in n for n in report.notes), report.notes
    assert report.load["requests"] > 0 and report.load["errors"] == 0, (report.load, report.notes)
    assert not any("load generator exited" in n for n in report.notes), report.notes
    assert report.exit_code == 0 and report.false_block_upper == pytest.approx(0.7076, abs=1e-4)
    assert reg.production(MODEL) == prod and [v.version for v in reg.versions(MODEL)] == [prod.version]
    assert "modelcd.contract" not in reg.tags(prod)  # never gated here: the sandbox gated its own copy
    assert {k: os.environ.get(k) for k in env.env} == env.env  # the sandbox's environment is gone
    assert not (tmp_path / "sandbox").exists()


# Live-only regressions (issue 29): each passes every offline gate, and only its rollout's steps on live traffic stop it.
LIVE = ["slower_under_live_load", "errors_on_live_requests", "too_little_traffic", "disagrees_on_shifted_live_texts"]


def test_live_only_faults_are_stopped_on_live_traffic_and_never_promoted(tmp_path, monkeypatch, tiny_trained, tiny_adapters):
    from modelcd_assets.faults.outcomes import ROLLOUT_ABORTED, ROLLOUT_PAUSED

    env, prod = tiny_production(tmp_path, monkeypatch, tiny_trained, tiny_adapters)
    rollout = (
        "rollout:\n  min_samples: 20\n  steps:\n    - shadow: 0.5\n      for: 30m\n      metrics: [error_rate, nan_rate, label_agreement]\n"
    )
    env.policy(MODEL, POLICY + rollout + "    - canary: 0.5\n      for: 6s\n    - promote\n")
    report = run_selftest(MODEL, env.env, only=LIVE, identical_controls=1, retrained_controls=0, under_load=False, root=tmp_path / "sb")
    print(report.render())
    assert {r.name: f"{r.actual}: {r.actual.detail}" for r in report.classes if not r.ok} == {}
    outcomes = {r.name: r.actual for r in report.classes}
    # The delay is judged where each arm answers callers of its own: the canary step; the errors at the first step.
    assert outcomes["slower_under_live_load"].kind == ROLLOUT_ABORTED and "step 2 (canary" in outcomes["slower_under_live_load"].detail
    assert outcomes["errors_on_live_requests"].kind == ROLLOUT_ABORTED and "step 1 (shadow" in outcomes["errors_on_live_requests"].detail
    assert outcomes["too_little_traffic"].kind == ROLLOUT_PAUSED and "step 1 (shadow" in outcomes["too_little_traffic"].detail
    # Trained to relabel the shifted channel: offline as good as production, its shadow pairs on the other half disagree.
    shifted = outcomes["disagrees_on_shifted_live_texts"]
    assert shifted.kind == ROLLOUT_ABORTED and "step 1 (shadow" in shifted.detail and "label_agreement low" in shifted.detail, shifted
    assert re.search(r"reproduced: .* agrees with production on \d+\.\d% of the other 500 \(FP32\)", shifted.detail), shifted
    # The clean copy is rolled out through both steps, under the policy's own section with each step set to 10 s (said).
    assert [(c.label, c.kind, c.outcome.kind) for c in report.controls] == [
        ("identical-1", "byte-identical, rolled out on live traffic", PROMOTED),
        ("base-files", "base's tokenizer and config files copied", PROMOTED),
    ], [c.outcome.detail for c in report.controls]
    assert any("set to 10 s each, up to 40 s while a metric wants samples (the policy's: 30m, 6s)" in n for n in report.notes), report.notes
    assert any("gated without the policy's rollout section" in n for n in report.notes), report.notes
    assert report.exit_code == 0 and env.registry.production(MODEL) == prod


# Ways around the gates closed by issue 17, each in seconds on the tiny model: the two outcome kinds the FAST subset lacks
# (never served, rejected before inference) and the other bypasses.
BYPASSES = [
    "onnx_external_data_hiding_code",
    "raw_onnx_external_data_hiding_code",
    "registry_unreachable",
    "production_alias_deleted",
    "alias_moved_to_blocked",
    "files_swapped_after_gating",
    "model_deleted_and_recreated",
    "attestation_forged_with_another_key",
    "oversized_requests",
]


def test_ways_around_a_verdict_end_as_expected_and_the_sandbox_production_stays(tmp_path, monkeypatch, tiny_trained, tiny_adapters):
    env, prod = tiny_production(tmp_path, monkeypatch, tiny_trained, tiny_adapters)

    report = run_selftest(
        MODEL, env.env, only=BYPASSES, identical_controls=1, retrained_controls=0, under_load=False, root=tmp_path / "sandbox", keep=True
    )
    print(report.render())

    assert sorted(r.name for r in report.classes) == sorted(BYPASSES)
    assert {r.name: f"{r.actual}: {r.actual.detail}" for r in report.classes if not r.ok} == {}
    details = {r.name: r.actual.detail for r in report.classes}
    assert "modelcd_alias_refused set" in details["alias_moved_to_blocked"] and "no valid verdict" in details["alias_moved_to_blocked"]
    assert all(
        f"{what}: not servable" in details["files_swapped_after_gating"]
        for what in ("the INT8 model", "the tokenizer", "the fetched weights")
    )
    assert "do not match their signature" in details["model_deleted_and_recreated"]
    assert "production's genuine verdict copied over" in details["attestation_forged_with_another_key"]
    assert "the attestation is about" in details["attestation_forged_with_another_key"]
    # The sandbox's production was restored after every class, so the clean control after them is promoted against it.
    assert [c.outcome.kind for c in report.controls] == [PROMOTED, PROMOTED], [c.outcome.detail for c in report.controls]
    assert report.exit_code == 0 and env.registry.production(MODEL) == prod
    assert Registry.from_env(local_defaults(tmp_path / "sandbox" / "home")).candidate_models() == [MODEL]  # the second model is gone


def test_a_collapsing_static_calibration_is_caught_by_int8_fidelity_on_the_tiny_model(tmp_path, monkeypatch, tiny_trained, tiny_adapters):
    # On MiniLM static INT8 does not collapse (bench/bench_calibration.py) and the class says it is not reproducible there;
    # on the tiny model the fault is real, measured first, and the fidelity gate must be the one that sees it.
    env, prod = tiny_production(tmp_path, monkeypatch, tiny_trained, tiny_adapters)

    report = run_selftest(
        MODEL,
        env.env,
        only=["static_calibration_collapse"],
        identical_controls=0,
        retrained_controls=0,
        under_load=False,
        root=tmp_path / "sandbox",
    )
    [result] = report.classes
    assert result.ok and "int8_agrees_with_fp32" in result.actual.gates, f"{result.actual}: {result.actual.detail}"
    assert re.match(
        r"reproduced: static INT8 calibrated on 4 one-word texts, on production's build: INT8 agrees with FP32 on 9\d\.\d\d% "
        r"of the evaluation split \(< 99\.00%\); ",
        result.actual.detail,
    ), result.actual.detail
    assert env.registry.production(MODEL) == prod


def test_cli_refuses_an_unknown_class_before_building_anything(modelcd_env, capsys):
    assert main(["faults", "run", "--only", "no_such_fault", "--controls", "0"]) == 2
    err = capsys.readouterr().err
    assert "unknown fault class(es) no_such_fault" in err and "nan_weights" in err


def test_gate_selftest_asset_reports_the_table_and_interception_rate(tmp_path, monkeypatch, tiny_trained, tiny_adapters):
    """With a fidelity floor of 50%, the one-word calibration (96.7% agreement on the tiny model) collapses nothing: the class is
    measured, reported as not reproducible on this model with what was measured, never gated, and counted apart."""
    import dagster as dg

    from modelcd_assets.defs.assets.gate_selftest import gate_selftest
    from modelcd_assets.resources.policy import PolicyResource
    from modelcd_assets.resources.registry import MlflowRegistryResource
    from modelcd_assets.resources.state import LocalStateResource

    env, prod = tiny_production(tmp_path, monkeypatch, tiny_trained, tiny_adapters)
    env.policy(MODEL, POLICY + "int8_fidelity:\n  min_top1_agreement: 0.5\n")
    e = env.env
    resources = {
        "registry": MlflowRegistryResource(tracking_uri=e["MLFLOW_TRACKING_URI"], artifact_location=e["MODELCD_MLFLOW_ARTIFACTS"]),
        "policy": PolicyResource(policy_dir=e["MODELCD_POLICY_DIR"]),
        "state": LocalStateResource(home=e["MODELCD_HOME"], data_dir=e["MODELCD_DATA"]),
    }
    config = {
        "ops": {
            "gate_selftest": {
                "config": {
                    "model": MODEL,
                    "controls": 0,
                    "only": ["pickle_renamed", "prometheus_unreachable", "static_calibration_collapse"],
                }
            }
        }
    }
    with dg.instance_for_test(temp_dir=e["DAGSTER_HOME"]) as instance:
        result = dg.materialize([gate_selftest], instance=instance, resources=resources, run_config=config)
    meta = {k: getattr(v, "value", v) for k, v in result.asset_materializations_for_node("gate_selftest")[0].metadata.items()}
    assert meta["passed"] is True and meta["interception_rate"] == 1.0 and meta["classes_in_expected_outcome"] == "2/2"
    assert meta["not_in_expected_outcome"] == "none"
    assert re.fullmatch(
        r"static_calibration_collapse: static INT8 calibrated on 4 one-word texts, on production's build: INT8 agrees with FP32 "
        r"on 9\d\.\d\d% of the evaluation split \(>= 50\.00%\)",
        meta["not_reproducible"],
    ), meta["not_reproducible"]
    assert "| pickle_renamed | refused at register | refused at register | yes |" in meta["classes"]
    assert (
        "| static_calibration_collapse | blocked by gate int8_agrees_with_fp32 | not reproducible on this model | not reproducible |"
        in meta["classes"]
    )
    assert re.search(r"not reproducible on this model, counted apart .*static_calibration_collapse", meta["summary"])
    assert env.registry.production(MODEL) == prod


# The causal-LM classes that take seconds on the tiny LM (same_reply trains an adapter; its builder is tested in test_builders.py).
LM_FAST = [
    "lm_nan_in_lora_b",
    "lm_lora_b_x50",
    "lm_added_special_token",
    "lm_chat_template_as_patch",
    "lm_eos_changed",
    "lm_other_rank",
    "lm_adapter_of_another_base",
    "lm_prompt_beyond_context",
    "lm_subnormal_lora",
    # Live-only (issue 29): byte-identical copies that only the rollout's steps on live chat completions stop.
    "lm_answers_run_to_max_tokens",
    "lm_errors_on_live_requests",
]


def test_causal_lm_classes_end_as_expected_and_the_clean_controls_pass(tmp_path, monkeypatch, tiny_lm):
    from modelcd_assets.faults.outcomes import NOT_REPRODUCIBLE
    from modelcd_assets_tests.tiny_lm import TINY_LM_POLICY

    env = make_env(tmp_path / "home", monkeypatch)
    env.policy("tiny-reply", TINY_LM_POLICY)
    env.registry.register(tiny_lm.base, "tiny-lm-base", role="base")
    prod = env.registry.register(tiny_lm.adapter, "tiny-reply")
    env.registry.move_production(prod, {"test": "production before the sandbox"}, expected=None, lock=TEST_LOCK)

    with pytest.raises(Exception, match="its faults are the causal-lm classes"):
        run_selftest("tiny-reply", env.env, task="classification", identical_controls=0, retrained_controls=0, root=tmp_path / "wrong")
    report = run_selftest(
        "tiny-reply", env.env, only=LM_FAST, identical_controls=1, retrained_controls=0, under_load=True, root=tmp_path / "sandbox"
    )
    print(report.render())
    assert {r.name: f"{r.actual}: {r.actual.detail}" for r in report.classes if not r.ok and r.actual.kind != NOT_REPRODUCIBLE} == {}
    assert [r.name for r in report.classes if r.actual.kind == NOT_REPRODUCIBLE] == []
    subnormal = next(r for r in report.classes if r.name == "lm_subnormal_lora")
    assert "served values are subnormal" in subnormal.actual.detail, subnormal.actual.detail
    live = {r.name: r.actual.detail for r in report.classes if r.name.startswith(("lm_answers", "lm_errors"))}
    assert "step 1 (shadow" in live["lm_answers_run_to_max_tokens"], live
    # 5% errors among the tiny LM's few shadow pairs (1 error in about 20) is not significant at the shadow step on a slow
    # or busy machine: the exact test lets it pass there and the canary step, with its own callers, aborts it (CI at
    # 09d3d95 saw step 1, a later run step 2 with 8 errors in 188). Either step stops it; production is never reached.
    assert re.search(r"at step [12] \((shadow|canary) ", live["lm_errors_on_live_requests"]), live
    assert [(c.label, c.outcome.kind) for c in report.controls] == [
        ("identical-1", PROMOTED),
        ("lora-b-x1.001", PROMOTED),
        ("base-files", PROMOTED),
        ("bf16", PROMOTED),
        ("fp16", PROMOTED),
    ], [c.outcome.detail for c in report.controls]
    assert report.controls[0].kind == "byte-identical, rolled out on live traffic", report.controls[0]
    assert any("without a server under load" in n for n in report.notes)
    assert report.exit_code == 0 and env.registry.production("tiny-reply") == prod
