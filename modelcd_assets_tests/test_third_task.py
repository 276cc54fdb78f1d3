"""Issue 28: a third kind of model, declared only here (modelcd_assets_tests/third_task), goes through the whole gated path:
register, every gate, promotion with its signed attestation, `modelcd verdict` and the gate report; and a worse version of
it is blocked by its own quality gate. No file of modelcd_assets knows it (test_task_seam.py greps for that)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from modelcd_assets.gate_results import read_gates
from modelcd_assets.launch import BAD_INPUT, BLOCKED, PROMOTED, code_location_graph, run_gate
from modelcd_assets.lib.classifier.base_model import build_tiny_base
from modelcd_assets.lib.demo.tickets import LABELS, generate
from modelcd_assets.lib.release.registry import TASK
from modelcd_assets.lib.tasks.names import TASK_MODULES_ENV
from modelcd_assets_tests.conftest import gate_report_page, module_state_fixtures

pytestmark = pytest.mark.slow
MODEL = "ticket-urgency"
THIRD_TASK = "modelcd_assets_tests.third_task.task"
POLICY = (
    "quantization:\n  variant: dynamic\nthroughput:\n  p99_slo_ms: 250\n  on_inconclusive: pass\n"
    "urgency:\n  max_mae: 0.15\n  max_mae_increase: 0.005\n"
)

env, instance = module_state_fixtures("urgency", {MODEL: POLICY})


@pytest.fixture(scope="module", autouse=True)
def third_task_declared():
    """Found as a plugin is: by the module MODELCD_TASK_MODULES names, in this process and in every one it starts."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(TASK_MODULES_ENV, THIRD_TASK)
        from modelcd_assets.lib.tasks.names import known_tasks

        assert "urgency-score" in known_tasks()
        yield


@pytest.fixture(scope="module")
def regressors(tmp_path_factory) -> dict:
    """A tiny one-output encoder trained on the tickets' urgency (good), and the same recipe stopped early (worse)."""
    from modelcd_assets_tests.third_task.task import train_regressor

    root = tmp_path_factory.mktemp("urgency")
    base = build_tiny_base(root / "base", ["urgency"])
    train = generate(3000, 1)
    assert set(LABELS) <= set(__import__(THIRD_TASK, fromlist=["URGENCY"]).URGENCY)
    return {"good": train_regressor(base, root / "good", train, steps=150), "worse": train_regressor(base, root / "worse", train, steps=8)}


def test_the_third_task_is_gated_promoted_attested_and_its_worse_version_blocked(env, instance, regressors, capsys):
    from modelcd_assets.cli import main
    from modelcd_assets.lib.release import servable

    good = env.registry.register(regressors["good"], MODEL, task="urgency-score")
    assert env.registry.tags(good)[TASK] == "urgency-score"
    run = run_gate(good, instance=instance)
    assert run.outcome == PROMOTED, (run.error, [(r.gate, r.status, r.reason) for r in run.rows])
    gates = {r.gate: r for r in run.rows}
    # Its own quality gate, and none of the other tasks' (no accuracy, perplexity, generation or golden gate).
    assert {"absolute_error_within_tolerance", "int8_agrees_with_fp32", "throughput_within_tolerance", "no_drift_detected"} <= set(gates)
    assert not {"accuracy_within_tolerance", "perplexity_within_tolerance", "generation_is_healthy", "golden_cases_pass"} & set(gates)
    assert "MAE" in gates["absolute_error_within_tolerance"].measured
    assert env.registry.production(MODEL) == good
    checked = servable.check(env.registry, env.home, good)  # the signed verdict over exactly its bytes
    assert set(checked.verdict.subjects) == {"registered-files", "int8-model", "tokenizer", "calibration-set"}
    assert "absolute_error_within_tolerance" in {g["gate"] for g in checked.verdict.gates}
    assert main(["verdict", MODEL, good.version, "--json"]) == 0
    answer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert answer["servable"] and answer["promotable"], answer
    # A code location loaded without the task's own gate (loaded before the task was declared) cannot promote it.
    graph = code_location_graph()
    without = dataclasses.replace(graph, blocking={k: v for k, v in graph.blocking.items() if k.name != "absolute_error_within_tolerance"})
    assert "absolute_error_within_tolerance: no result recorded" in read_gates(instance, good.key, without).problems

    worse = env.registry.register(regressors["worse"], MODEL, task="urgency-score")
    blocked = run_gate(worse, instance=instance)
    assert blocked.outcome == BLOCKED and blocked.report_error == ""
    quality = next(r for r in blocked.rows if r.gate == "absolute_error_within_tolerance")
    assert quality.status == "fail" and "vs production" in quality.measured, quality
    page = gate_report_page(instance, worse)
    assert page["promotable"] is False and any(p.startswith("absolute_error_within_tolerance") for p in page["problems"])
    assert env.registry.production(MODEL) == good
    assert main(["verdict", MODEL, worse.version]) == 3


def test_a_policy_that_sets_another_task_s_gate_is_refused_naming_the_gate(env, instance, regressors):
    env.policy(MODEL, POLICY + "perplexity:\n  max_relative_increase: 0.02\n")
    try:
        ref = env.registry.register(regressors["good"], MODEL, task="urgency-score")
        run = run_gate(ref, instance=instance)
        assert run.outcome == BAD_INPUT, run.error
        assert (
            "'perplexity'" in run.error and "perplexity_within_tolerance" in run.error and "urgency-score models do not have" in run.error
        )
    finally:
        env.policy(MODEL, POLICY)
