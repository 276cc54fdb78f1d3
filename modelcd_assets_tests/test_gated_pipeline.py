"""The whole gated path on tiny models, against a throwaway MLflow SQLite registry and Dagster instance.

One module-scoped state folder: production moves as the scenario goes, as it would in a real registry.
"""

from __future__ import annotations

import dagster as dg
import pytest

from modelcd_assets.launch import BAD_INPUT, BLOCKED, PROMOTED, run_gate
from modelcd_assets.lib.hashing import file_sha256
from modelcd_assets.lib.inference.builds import read_json
from modelcd_assets.lib.inference.quantize import artifact_id
from modelcd_assets.lib.layout import StateLayout
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import PRODUCTION
from modelcd_assets_tests.conftest import TEST_LOCK, TINY_GATED_POLICY, gate_report_page, module_state_fixtures

pytestmark = pytest.mark.slow
MODEL = "tiny-intent"
POLICY = TINY_GATED_POLICY


env, instance = module_state_fixtures("pipeline", {MODEL: POLICY})


@pytest.fixture(scope="module")
def base(env, tiny_trained):
    ref = env.registry.register(tiny_trained, "tiny-base", role="base")
    assert ref.uri == "models:/tiny-base/1"
    return ref


def statuses(run) -> dict[str, str]:
    return {r.gate: r.status for r in run.rows}


def production(env):
    return env.registry.production(MODEL)


def test_first_candidate_is_judged_against_floors_and_promoted(env, instance, base, tiny_adapters):
    ref = env.registry.register(tiny_adapters["good"], MODEL)
    run = run_gate(ref, instance=instance)
    assert run.outcome == PROMOTED, run.error
    # The tiny model's policy declares no golden cases: that gate says so rather than "pass".
    assert set(statuses(run).values()) == {"pass", "no golden cases declared"}
    accuracy = next(r for r in run.rows if r.gate == "accuracy_within_tolerance")
    assert "first candidate" in accuracy.reason and "floor only" in accuracy.threshold
    assert production(env) == ref
    promotion = env.registry.tags(ref)["modelcd.promotion"]
    assert "accuracy_within_tolerance" in promotion


@pytest.fixture
def code_location_loads(monkeypatch) -> dict[str, int]:
    """How often the code location is loaded (load_from_defs_folder, which definitions.py calls) inside and outside a run."""
    real_load, real_execute, running = dg.load_from_defs_folder, dg.JobDefinition.execute_in_process, []
    loads = {"in a run": 0, "outside runs": 0}

    def counted_load(*args, **kwargs):
        loads["in a run" if running else "outside runs"] += 1
        return real_load(*args, **kwargs)

    def tracked_execute(job, *args, **kwargs):
        running.append(job.name)
        try:
            return real_execute(job, *args, **kwargs)
        finally:
            running.pop()

    monkeypatch.setattr(dg, "load_from_defs_folder", counted_load)
    monkeypatch.setattr(dg.JobDefinition, "execute_in_process", tracked_execute)
    return loads


def test_byte_identical_reregistration_passes_every_gate(env, instance, base, tiny_adapters, code_location_loads):
    """...and no run loads the code location: the gated run, its promotion and its gate report read the graph they hold."""
    ref = env.registry.register(tiny_adapters["good"], MODEL)
    run = run_gate(ref, instance=instance)
    assert run.outcome == PROMOTED, (run.error, statuses(run))
    assert set(statuses(run).values()) == {"pass", "no golden cases declared"}
    # Production's own INT8 bytes: its speed and cost are production's by hash, whatever the machine's load did to the
    # timing (the crafted "slow" candidate below, another graph, is still timed and blocked). Gated once more, so the
    # test does not depend on an earlier one having made these bytes production.
    again = run_gate(env.registry.register(tiny_adapters["good"], MODEL), instance=instance)
    assert again.outcome == PROMOTED, (again.error, statuses(again))
    speed = next(r for r in again.rows if r.gate == "throughput_within_tolerance")
    assert "1x by hash" in speed.measured and "not judged" in speed.reason, (speed.measured, speed.reason)
    assert "production's own INT8 graph" in next(r for r in again.rows if r.gate == "cost_within_budget").measured
    assert production(env) == again.ref
    assert not run.report_error, run.report_error
    assert code_location_loads["in a run"] == 0
    assert code_location_loads["outside runs"] >= 2  # run_gate loads it for the gated job and the report's: the count sees loads


@pytest.mark.parametrize(
    "candidate, gate",
    [
        ("worse", "accuracy_within_tolerance"),
        ("unfaithful", "int8_agrees_with_fp32"),
        ("slow", "throughput_within_tolerance"),
        ("nan_weights", "weights_are_finite"),
        ("relabelled", "semver_covers_contract_change"),
    ],
)
def test_crafted_candidate_fails_only_its_gate_and_alias_stays(env, instance, base, tiny_adapters, crafted, candidate, gate):
    before = production(env)
    folder = tiny_adapters.get(candidate) or crafted[candidate]
    ref = env.registry.register(folder, MODEL)
    run = run_gate(ref, instance=instance)
    got = statuses(run)
    assert run.outcome == BLOCKED, (run.error, got)
    assert got[gate] == "fail", got
    # NaN weights also leave their norms not comparable with production's: weights_within_scale refuses to pass them.
    # A slower model also costs more per request: the cost gate sees the same slowdown.
    also = {"nan_weights": {"weights_within_scale"}, "slow": {"cost_within_budget"}}.get(candidate, set())
    others = {g: s for g, s in got.items() if g != gate and g not in also}
    assert "fail" not in others.values(), others
    assert production(env) == before
    assert str(env.registry.client.get_model_version_by_alias(MODEL, PRODUCTION).version) == before.version


def test_shifted_traffic_fails_the_drift_gate(env, instance, base):
    prod = production(env)
    run = run_gate(prod, traffic_sample="traffic_shifted", instance=instance)
    got = statuses(run)
    assert run.outcome == BLOCKED
    assert got["no_drift_detected"] == "fail", got
    assert "traffic has drifted" in next(r.reason for r in run.rows if r.gate == "no_drift_detected")
    # benchmark_results follows drift_report (a causal LM prices its answers' tokens there): its gates do not run.
    assert {g for g, s in got.items() if s == "not run"} == {"throughput_within_tolerance", "cost_within_budget"}, got
    assert {s for g, s in got.items() if g != "no_drift_detected"} <= {"pass", "no golden cases declared", "not run"}
    assert production(env) == prod


def test_a_registry_error_mid_run_fails_the_run_and_promotes_nothing(env, instance, base, tiny_adapters, monkeypatch):
    """Before, any MlflowException read as 'no production': the candidate became a 'first candidate' judged on floors only."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INTERNAL_ERROR

    from modelcd_assets.launch import REGISTRY_UNAVAILABLE

    before = production(env)
    ref = env.registry.register(tiny_adapters["good"], MODEL)

    def outage(self, name):
        raise MlflowException("(sqlite3.OperationalError) database is locked", error_code=INTERNAL_ERROR)

    monkeypatch.setattr(MlflowClient, "get_registered_model", outage)
    run = run_gate(ref, instance=instance)
    monkeypatch.undo()
    assert run.outcome == REGISTRY_UNAVAILABLE, (run.outcome, run.error)  # by its type (issue 28); before, ERROR
    assert "could not read the production alias" in run.error and "nothing was decided" in run.error
    assert production(env) == before
    assert "modelcd.promotion" not in env.registry.tags(ref)


def test_production_moved_while_gated_is_superseded(env, instance, base, tiny_adapters, monkeypatch):
    """Compare-and-set: another promotion lands between the last gate and this one; this candidate must not overwrite it."""
    from modelcd_assets.defs.assets import production_model as step
    from modelcd_assets.launch import SUPERSEDED

    judged_against = production(env)
    rival = env.registry.register(tiny_adapters["good"], MODEL)
    assert run_gate(rival, instance=instance).outcome == PROMOTED  # a real, gated rival...
    env.registry.move_production(judged_against, {"test": "back, so the rival can land mid-run"}, expected=rival, lock=TEST_LOCK)
    ref = env.registry.register(tiny_adapters["good"], MODEL)

    def another_promotion_lands(name):
        if name == "before_promotion":
            env.registry.move_production(rival, {"test": "a concurrent promotion"}, expected=judged_against, lock=TEST_LOCK)

    monkeypatch.setattr(step, "failpoint", another_promotion_lands)
    run = run_gate(ref, instance=instance)
    assert run.outcome == SUPERSEDED, (run.outcome, run.error)
    assert run.error.startswith(f"production of {MODEL} moved from {judged_against.version} to {rival.version} while {ref.uri} was gated")
    assert production(env) == rival
    assert "modelcd.promotion" not in env.registry.tags(ref)
    monkeypatch.undo()
    again = run_gate(ref, instance=instance)  # re-gated against the new production, it goes through
    assert again.outcome == PROMOTED, (again.outcome, again.error)
    assert env.registry.tags(ref)["modelcd.previous_production"] == rival.version


def test_promotion_step_refuses_when_a_gate_result_is_missing(env, instance, base, tiny_adapters):
    """The second lock: materializing production_model alone, with no gate results, must not move the alias."""
    from modelcd_assets.launch import definitions

    before = production(env)
    ref = env.registry.register(tiny_adapters["good"], MODEL)
    instance.add_dynamic_partitions("candidates", [ref.key])
    d = definitions()
    result = dg.materialize([d.resolve_assets_def("production_model")], instance=instance, partition_key=ref.key, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "refusing to promote" in failure.event_specific_data.error.cause.message
    assert production(env) == before


def test_cli_gate_exit_codes_and_status(env, base, tiny_adapters, capsys):
    """`modelcd gate` exits 3 when a gate blocks and 0 when promoted; `modelcd status` shows both."""
    from modelcd_assets.cli import main

    before = production(env)
    worse = env.registry.register(tiny_adapters["worse"], MODEL)
    assert main(["gate", MODEL, worse.version]) == 3
    out = capsys.readouterr().out
    assert "accuracy_within_tolerance" in out and "BLOCKED" in out
    assert production(env) == before

    again = env.registry.register(tiny_adapters["good"], MODEL)
    assert main(["gate", MODEL, again.version]) == 0
    assert "PROMOTED" in capsys.readouterr().out
    assert production(env) == again

    assert main(["status", MODEL]) == 0
    status = capsys.readouterr().out
    assert f"{MODEL}: production = {again.version}" in status
    worse_row = next(line for line in status.splitlines() if line.startswith(f"{worse.version} "))
    assert "accuracy_within_tolerance=fail" in worse_row and "throughput_within_tolerance" not in worse_row
    again_row = next(line for line in status.splitlines() if line.startswith(f"{again.version} "))
    assert "production" in again_row and "/" in again_row and "=fail" not in again_row


def test_every_gated_run_leaves_a_gate_report_page_whatever_the_gates_decided(env, instance, base, tiny_adapters, capsys):
    """One page per candidate in the UI: written for a blocked candidate too, whose assets below the failed gate never ran."""
    from modelcd_assets.cli import main
    from modelcd_assets.defs.assets.gate_report import report_url

    prod = production(env)
    worse = env.registry.register(tiny_adapters["worse"], MODEL)
    run = run_gate(worse, instance=instance)
    assert run.outcome == BLOCKED and run.report_error == ""
    page = gate_report_page(instance, worse)
    assert page["promotable"] is False and any(p.startswith("accuracy_within_tolerance") for p in page["problems"])
    assert "| accuracy_within_tolerance | **fail** |" in page["decision"] and "**blocked: accuracy_within_tolerance" in page["decision"]
    assert f"judged against production version: {prod.version}" in page["decision"]
    assert page["in_production"] == f"no (production is version {prod.version})"
    assert page["policy"]["accuracy"]["absolute_floor"] == 0.6  # the effective policy it was judged by
    promoted = gate_report_page(instance, prod)
    assert promoted["promotable"] is True and promoted["in_production"] == "yes" and "**promotable" in promoted["decision"]
    assert main(["status", MODEL, "--ui-url", "http://ui.example:3000/"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(f"{worse.version} "))
    assert report_url("http://ui.example:3000/", worse.key) in row
    assert f"http://ui.example:3000/assets/gate_report?view=partitions&partition={MODEL}%3A{worse.version}" in row


def test_status_shows_what_promotion_would_decide_after_a_rebuild(env, instance, capsys):
    """Before, status said 'pass' from the check records alone while promotion refused a rebuilt lineage."""
    from modelcd_assets.cli import main
    from modelcd_assets.launch import definitions

    prod = production(env)
    d = definitions()
    dg.materialize([d.resolve_assets_def("quantized_model")], instance=instance, partition_key=prod.key)  # rebuilt, gates not re-run
    assert main(["status", MODEL]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(f"{prod.version} "))
    assert "not promotable" in row and "stale" in row, row
    assert run_gate(prod, instance=instance).outcome == PROMOTED  # re-gating makes the lineage current again
    # Issue 17: production judged again was judged against itself (every paired gate passed on nothing); it is judged
    # against the version it replaced, and the alias and the promotion record stay as they were.
    previous = env.registry.tags(prod)["modelcd.previous_production"]
    record = record_of(env, prod)
    assert previous not in ("", prod.version) and (record.production_version, record.regated_production) == (previous, True)
    assert record.baseline_ref == prod  # what promotion's compare-and-set expects: the alias, at the candidate itself
    assert read_json(StateLayout(env.home).candidate(prod).benchmark)["production"] == f"{MODEL}:{previous}"
    assert production(env) == prod and env.registry.tags(prod)["modelcd.previous_production"] == previous
    assert main(["status", MODEL]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(f"{prod.version} "))
    assert "promotable" in row and "not promotable" not in row, row


def record_of(env, ref) -> CandidateRecord:
    return CandidateRecord.of(env.home, ref)


def gated_record(env, instance, folder, model: str) -> CandidateRecord:
    """Register folder as a new version of model, gate it, and return its candidate record."""
    ref = env.registry.register(folder, model)
    run_gate(ref, instance=instance)
    return record_of(env, ref)


def test_models_sharing_a_build_keep_their_own_variant_choice(env, instance, base, tiny_adapters):
    """The chosen variant used to live in the content-addressed build folder, shared by every model name with the same bytes."""
    other = "tiny-intent-static"
    env.policy(other, "accuracy:\n  absolute_floor: 0.6\nquantization:\n  variant: static\nthroughput:\n  p99_slo_ms: 250\n")
    mine = gated_record(env, instance, tiny_adapters["good"], other)
    theirs = record_of(env, production(env))
    assert mine.build_dir == theirs.build_dir  # the same bytes, one build...
    assert (mine.chosen_variant(), theirs.chosen_variant()) == ("static", "dynamic")  # ...and each model's own choice


def test_a_causal_lm_weight_variant_pinned_for_a_classifier_is_refused_by_name(env, instance, base, tiny_adapters):
    other = "tiny-intent-mispinned"
    env.policy(other, "accuracy:\n  absolute_floor: 0.6\nquantization:\n  variant: int4-rtn\n")
    run = run_gate(env.registry.register(tiny_adapters["good"], other), instance=instance)
    assert run.outcome == BAD_INPUT and "quantization.variant is 'int4-rtn', which is not a classifier's" in run.error, run.error
    assert env.registry.production(other) is None


def test_the_variant_is_chosen_once_per_base_and_later_adapters_build_only_it(env, instance, base, tiny_adapters):
    """Each candidate used to pick its own variant from its own timings; now the first adapter of a base decides for all."""
    other = "tiny-intent-auto"
    env.policy(other, "accuracy:\n  absolute_floor: 0.6\nthroughput:\n  p99_slo_ms: 250\n  on_inconclusive: pass\n")
    decided = gated_record(env, instance, tiny_adapters["good"], other)
    ids = {v: artifact_id(v, decided.calibration_sha256) for v in ("static", "dynamic")}
    assert decided.build.int8(ids["static"]).is_file() and decided.build.int8(ids["dynamic"]).is_file()  # both built and timed, once
    later = gated_record(env, instance, tiny_adapters["good2"], other)
    chosen = decided.chosen_variant()
    other_variant = {"static": "dynamic", "dynamic": "static"}[chosen]
    assert later.build_dir != decided.build_dir and later.chosen_variant() == chosen
    assert later.build.int8(ids[chosen]).is_file() and not later.build.int8(ids[other_variant]).is_file()
    assert f"chosen once for this base and calibration set, when {decided.ref.uri} was gated" in later.quantization()["why"]
    # Timed once, for the decision; a later adapter's speed is the throughput gate's to measure.
    assert "items_per_s" in read_json(decided.quantization_report)["variants"][chosen]
    assert "items_per_s" not in read_json(later.quantization_report)["variants"][chosen]
    # Production's labels on the traffic were predicted once, kept in its build for every candidate judged against it.
    assert decided.build.predictions(ids[chosen], file_sha256(env.data / "traffic_current.jsonl")).is_file()


def test_modelcd_gate_started_in_the_background_can_still_be_stopped(env, instance, base):
    """An in-process gated run used to leave SIGTERM ignored when SIGINT was (a background start): `kill` did nothing."""
    import signal
    import subprocess

    from modelcd_assets.lib.operations.processes import stop_process

    saved = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        run_gate(production(env), instance=instance)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        assert stop_process(subprocess.Popen(["sleep", "60"]), timeout=5) == -15
    finally:
        signal.signal(signal.SIGINT, saved)


def test_contract_diff_cli_and_semver_tags(env, base, capsys):
    """Contracts and SemVer are MLflow version tags; `modelcd contract diff` explains the relabelled candidate's block."""
    import json

    from modelcd_assets.cli import main
    from modelcd_assets.lib.release.registry import CONTRACT, SEMVER

    tags = {v.version: env.registry.tags(v) for v in env.registry.versions(MODEL)}
    assert tags["1"][SEMVER] == "1.0.0"
    relabelled = next(v for v, t in tags.items() if CONTRACT in t and json.loads(t[CONTRACT])["id2label"][0] == "technical")
    assert main(["contract", "diff", MODEL, "1", relabelled]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{MODEL} 1 (1.0.0) -> {relabelled}") and "requires a major bump" in out
    assert "MAJOR  labels changed order or names" in out
    assert main(["contract", "diff", MODEL, "1", "2"]) == 0
    assert "no contract change (weights only)" in capsys.readouterr().out


def test_adapter_with_a_wrong_rank_is_bad_input_and_alias_stays(env, instance, base, tiny_adapters, tmp_path):
    import json
    import shutil

    from modelcd_assets.launch import BAD_INPUT

    before = production(env)
    folder = shutil.copytree(tiny_adapters["good"], tmp_path / "wrong-rank")
    cfg = json.loads((folder / "adapter_config.json").read_text())
    cfg["r"] = 16
    (folder / "adapter_config.json").write_text(json.dumps(cfg))
    run = run_gate(env.registry.register(folder, MODEL), instance=instance)
    assert run.outcome == BAD_INPUT, (run.outcome, run.error)
    assert "does not fit base" in run.error and "\n" not in run.error
    assert production(env) == before


@pytest.mark.parametrize(
    "promotion, why",
    [
        (None, "no gated run promoted it (no modelcd.promotion record), so there is no earlier production it was judged against"),
        (
            '{"rollback_from": "1", "trigger": "manual"}',
            "a rollback from version 1 restored it, so what it was first judged against is not recorded",
        ),
    ],
)
def test_a_production_no_gated_run_promoted_is_never_judged_against_itself(env, instance, base, tiny_adapters, promotion, why):
    """Issue 17: gating the version production points at judged it against itself, and every paired gate passed on nothing."""
    from modelcd_assets.launch import BAD_INPUT
    from modelcd_assets.lib.release.registry import PREVIOUS_PRODUCTION, PROMOTION

    before = production(env)
    ref = env.registry.register(tiny_adapters["good"], MODEL)
    if promotion:
        env.registry.set_tags(ref, {PROMOTION: promotion, PREVIOUS_PRODUCTION: before.version})
    env.registry.client.set_registered_model_alias(MODEL, PRODUCTION, ref.version)  # by hand, outside any gated run
    try:
        run = run_gate(ref, instance=instance)
    finally:
        env.registry.client.set_registered_model_alias(MODEL, PRODUCTION, before.version)
        for tag in (PROMOTION, PREVIOUS_PRODUCTION) if promotion else ():
            env.registry.client.delete_model_version_tag(MODEL, ref.version, tag)
    assert run.outcome == BAD_INPUT, (run.outcome, run.error)
    assert (
        f"{ref.uri} is production itself; a version is never judged against itself: {why}. Nothing was judged and production stays."
        in run.error
    )
    assert {r.status for r in run.rows} == {"not run"}  # no gate ran, so none passed
    assert PROMOTION not in env.registry.tags(ref)


def test_a_deleted_production_alias_is_never_a_first_candidate(env, instance, base, tiny_adapters):
    """Issue 17: with the alias deleted, the next candidate was judged as a first one (floors only) though a production existed."""
    from modelcd_assets.launch import BAD_INPUT
    from modelcd_assets.lib.release.registry import PROMOTION

    before = production(env)
    ref = env.registry.register(tiny_adapters["worse"], MODEL)  # would pass the floor-only accuracy gate of a first candidate
    env.registry.client.delete_registered_model_alias(MODEL, PRODUCTION)
    try:
        run = run_gate(ref, instance=instance)
        assert production(env) is None  # nothing was promoted over the missing alias
    finally:
        env.registry.client.set_registered_model_alias(MODEL, PRODUCTION, before.version)
    assert run.outcome == BAD_INPUT, (run.outcome, run.error)
    assert (
        f"production alias missing: {MODEL} had a production version (last promoted: version {before.version}) but its `production` "
        f"alias is gone; {ref.uri} is not judged as a first candidate" in run.error
    )
    assert (
        f"python -c \"from mlflow import MlflowClient; MlflowClient('{env.registry.shown_uri}').set_registered_model_alias('{MODEL}', "
        f"'production', '{before.version}')\", then gate it again: modelcd gate {MODEL} {ref.version}" in run.error
    )
    assert {r.status for r in run.rows} == {"not run"} and PROMOTION not in env.registry.tags(ref)
