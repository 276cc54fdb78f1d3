"""Recalibration without retraining, on the tiny model: a new calibration set becomes a gated calibration revision of production.

One module-scoped state folder, production pinned to static INT8: a refused set changes nothing, a poor set's
revision is blocked and production keeps serving its own artifact, a good set's revision is promoted and served.
"""

from __future__ import annotations

import json

import dagster as dg
import numpy as np
import pytest

from modelcd_assets.cli import EXIT_BAD_INPUT, EXIT_BLOCKED, EXIT_PROMOTED, main
from modelcd_assets.launch import PROMOTED, SUPERSEDED, definitions, latest_gate_rows, run_gate
from modelcd_assets.lib.demo.tickets import generate
from modelcd_assets.lib.hashing import file_sha256
from modelcd_assets.lib.inference.quantize import artifact_id
from modelcd_assets.lib.judging.policy import ServingPolicy
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import CALIBRATION, REVISION_OF, WEIGHTS_VERSION, CandidateRef
from modelcd_assets.lib.splits import read_split
from modelcd_assets.serving.classifier.pool import ClassifierPool
from modelcd_assets_tests.conftest import module_state_fixtures

pytestmark = pytest.mark.slow
MODEL = "tiny-recal"
POLICY = "accuracy:\n  absolute_floor: 0.6\nquantization:\n  variant: static\nthroughput:\n  p99_slo_ms: 250\n  on_inconclusive: pass\n"

# The whole scenario on SQLite and on PostgreSQL (Dagster's storage and MLflow's backend store).
env, instance = module_state_fixtures("recalibration", {MODEL: POLICY}, backends=("sqlite", "postgres"))


def write_texts(path, texts):
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


def poor_texts() -> list[str]:
    """A few hundred short, unrepresentative texts: one polite word repeated 5 to 9 times (median 9 tokens, the tickets' 18)."""
    rng = np.random.default_rng(0)
    return [" ".join(["thanks"] * int(k)) for k in rng.integers(5, 10, size=300)]


def good_texts(evaluation: set[str], seed: int = 7) -> list[str]:
    """Fresh tickets from the same generator as the evaluation split, another seed, less those that happen to be in it."""
    return [ex.text for ex in generate(400, seed) if ex.text not in evaluation][:300]


def record(env, version: str) -> CandidateRecord:
    return CandidateRecord.of(env.home, CandidateRef(MODEL, version))


def gates(run) -> dict[str, str]:
    return {r.gate: r.status for r in run.rows}


@pytest.fixture(scope="module")
def production_v1(env, instance, tiny_trained, tiny_adapters):
    env.registry.register(tiny_trained, "tiny-base", role="base")
    ref = env.registry.register(tiny_adapters["good"], MODEL)
    run = run_gate(ref, instance=instance)
    assert run.outcome == PROMOTED, (run.error, gates(run))
    return ref


def test_the_first_version_is_pinned_to_the_data_folders_calibration_split(env, production_v1):
    pinned = env.registry.tags(production_v1)[CALIBRATION]
    assert pinned == file_sha256(env.data / "calibration.jsonl")
    assert record(env, "1").quantization()["artifact_id"] == artifact_id("static", pinned)


@pytest.mark.parametrize(
    "problem, texts, reason",
    [
        ("overlaps the evaluation split", lambda ev: ev[:250], "are in the evaluation split"),
        ("too few texts", lambda ev: [t + " please" for t in ev[:50]], "fewer than calibration.min_examples (200)"),
        ("texts far shorter than the evaluation split's", lambda ev: ["ok"] * 300, "median length is 3 tokens"),
    ],
)
def test_a_bad_set_is_refused_with_the_reason_and_nothing_changes(env, instance, production_v1, tmp_path, capsys, problem, texts, reason):
    evaluation = [ex.text for ex in read_split(env.data / "evaluation.jsonl")]
    versions = env.registry.versions(MODEL)
    path = write_texts(tmp_path / "set.jsonl", texts(evaluation))
    assert main(["calibrate", MODEL, "--from", str(path)]) == EXIT_BAD_INPUT, problem
    refused = [line for line in capsys.readouterr().err.splitlines() if line.startswith("refused: ")]
    assert len(refused) == 1 and reason in refused[0] and "BadCalibrationSet" not in refused[0], refused
    assert env.registry.calibration_of(MODEL) is None  # the current set stays
    assert env.registry.versions(MODEL) == versions  # and no revision was registered


def test_calibration_revision_is_requested_by_declarative_automation_when_a_set_is_registered(env, instance, production_v1):
    defs = definitions()
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    cursor = first.cursor
    quiet = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
    assert quiet.total_requested == 0  # nothing new upstream: nothing requested
    job = defs.resolve_job_def("calibrate")
    assert job.execute_in_process(
        instance=instance, asset_selection=[dg.AssetKey("calibration_set")]
    ).success  # the default set, versioned again
    after = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=quiet.cursor)
    assert after.total_requested == 1
    assert after.get_requested_partitions(dg.AssetKey("calibration_revision")) == {None}


def test_a_poor_set_makes_a_revision_the_gates_block_and_production_keeps_its_artifact(env, instance, production_v1, tmp_path, capsys):
    served = record(env, "1")
    artifact_before = file_sha256(served.chosen_int8())
    assert artifact_before == served.quantization()["artifact_sha256"]
    path = write_texts(tmp_path / "poor.jsonl", poor_texts())
    assert main(["calibrate", MODEL, "--from", str(path)]) == EXIT_BLOCKED
    out = capsys.readouterr().out
    poor = file_sha256(path)
    assert env.registry.calibration_of(MODEL) == poor  # the set was valid: it is current, and its revision was judged
    revision = max(env.registry.versions(MODEL), key=lambda r: int(r.version))
    tags = env.registry.tags(revision)
    assert (tags[REVISION_OF], tags[WEIGHTS_VERSION], tags[CALIBRATION]) == ("1", "1", poor), tags
    assert f"production {production_v1.version} was calibrated with set" in out
    rec = record(env, revision.version)
    assert rec.build_dir == served.build_dir and rec.content_hash == served.content_hash  # the same weights, not retrained
    fidelity = rec.quantization()
    assert fidelity["chosen"] == "static" and fidelity["artifact_id"] == artifact_id("static", poor)
    assert env.registry.production(MODEL) == production_v1
    # What production serves was not overwritten by its revision's quantization.
    assert file_sha256(served.chosen_int8()) == artifact_before
    rows, problems = latest_gate_rows(instance, revision)
    failed = {r.gate for r in rows if r.status == "fail"}
    assert failed and failed <= {"int8_agrees_with_fp32", "accuracy_within_tolerance"}, {r.gate: (r.status, r.measured) for r in rows}
    assert problems


def test_a_good_set_makes_a_revision_that_is_promoted_and_served(env, instance, production_v1, tmp_path, capsys):
    path = write_texts(tmp_path / "good.jsonl", good_texts({ex.text for ex in read_split(env.data / "evaluation.jsonl")}))
    code = main(["calibrate", MODEL, "--from", str(path)])
    assert code == EXIT_PROMOTED, capsys.readouterr().err[-3000:]
    good = file_sha256(path)
    prod = env.registry.production(MODEL)
    tags = env.registry.tags(prod)
    assert (tags[REVISION_OF], tags[WEIGHTS_VERSION], tags[CALIBRATION]) == ("1", "1", good)
    assert json.loads(tags["modelcd.promotion"])  # promoted by the same promotion step as any version
    assert tags["modelcd.previous_production"] == "1"
    # The server swaps to it like to any version: the artifact its gates judged, probe-verified.
    pool = ClassifierPool(MODEL, env.registry, env.home, ServingPolicy())
    old, new = pool.load("1"), pool.load(prod.version)
    assert new.artifact_sha256 == record(env, prod.version).quantization()["artifact_sha256"] != old.artifact_sha256
    assert pool.activate(prod.version).version == prod.version
    # Nothing left to revise: the automation's next run registers nothing.
    assert main(["calibrate", MODEL, "--from", str(path), "--no-gate"]) == EXIT_PROMOTED
    assert "up to date" in capsys.readouterr().out
    assert env.registry.production(MODEL) == prod == CandidateRef(MODEL, prod.version)


def test_a_revision_of_a_version_that_is_no_longer_production_is_superseded_not_gated(env, instance, production_v1, capsys):
    """Gated against the newer production, it could pass and put the older weights it carries back into production."""
    prod = env.registry.production(MODEL)
    assert prod != production_v1  # the good set's revision replaced it
    stale = env.registry.register_revision(production_v1, env.registry.calibration_of(MODEL))
    run = run_gate(stale, instance=instance)
    assert run.outcome == SUPERSEDED, (run.outcome, run.error)
    assert f"calibration revision of version 1, but production is now {prod.version}" in run.error
    assert env.registry.production(MODEL) == prod
    assert main(["status", MODEL]) == 0
    assert "calibration revision of 1" in capsys.readouterr().out


def test_a_set_sent_inline_through_dagsters_graphql_api_is_registered_and_its_revision_gated(env, instance, production_v1, tmp_path):
    """A client on another machine has no file on the machine that runs the job: it hands the texts inline, through the
    launchRun mutation (dagster-graphql's client) of the stack `modelcd up` runs (`dagster dev`: the webserver, and the
    daemon that dequeues runs and runs the sensors). A set is refused with the same reasons as a file; an accepted one
    becomes a calibration revision that the registry sensor gates, as any new version."""
    import hashlib
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path
    from types import SimpleNamespace

    import httpx
    from dagster_graphql import DagsterGraphQLClient

    from modelcd_assets.launch import StepError
    from modelcd_assets.lib.operations.processes import start_process, stop_process
    from modelcd_assets.lib.operations.settings import PG_URL_VAR
    from modelcd_assets.lib.release.calibration import jsonl
    from modelcd_assets_tests.serving.conftest import free_port

    if env.env.get(PG_URL_VAR):
        pytest.skip("launchRun does not depend on the storage: run once, on SQLite")
    done = (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)

    def wait(what: str, check, seconds: float = 300):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert stack.poll() is None, (tmp_path / "dagster.log").read_text()[-3000:]
            found = check()
            if found:
                return found
            time.sleep(1)
        raise AssertionError(f"{what} within {seconds} s; see {tmp_path / 'dagster.log'}")

    def launch(texts: list[str]) -> str:
        return client.submit_job_execution(
            "calibrate", run_config={"ops": {"calibration_set": {"config": {"model": MODEL, "texts": texts}}}}
        )

    def answering() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/server_info", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    port, workspace = free_port(), Path(__file__).resolve().parents[1] / "workspace.yaml"
    log = open(tmp_path / "dagster.log", "wb")
    stack = start_process(
        [str(Path(sys.executable).with_name("dagster")), "dev", "-w", str(workspace), "-h", "127.0.0.1", "-p", str(port)],
        env=dict(os.environ, **env.env),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait("the webserver answered", answering, 180)
        client = DagsterGraphQLClient("127.0.0.1", port_number=port)
        before = env.registry.calibration_of(MODEL)
        refused = launch(["thanks"] * 5)
        assert wait(
            "the refused set's run finished", lambda: client.get_run_status(refused) in done and client.get_run_status(refused)
        ) == (dg.DagsterRunStatus.FAILURE)
        failures = [e.dagster_event for e in instance.all_logs(refused, of_type=dg.DagsterEventType.STEP_FAILURE)]
        error = StepError.of(SimpleNamespace(all_events=failures))  # as `modelcd calibrate` reads a run's failure
        assert (error.step, error.cls_name) == ("calibration_set", "BadCalibrationSet"), error
        assert (
            "the inline calibration set (5 texts) was refused" in error.message
            and "fewer than calibration.min_examples (200)" in error.message
        )
        assert env.registry.calibration_of(MODEL) == before  # the current set stays

        texts = good_texts({ex.text for ex in read_split(env.data / "evaluation.jsonl")}, seed=13)
        accepted = launch(texts)
        assert wait("the set's run finished", lambda: client.get_run_status(accepted) in done and client.get_run_status(accepted)) == (
            dg.DagsterRunStatus.SUCCESS
        )
        digest = hashlib.sha256(jsonl(texts)).hexdigest()  # the file the texts would be, written one {"text": ...} a line
        assert env.registry.calibration_of(MODEL) == digest
        revision = max(env.registry.versions(MODEL), key=lambda r: int(r.version))
        assert env.registry.tags(revision)[CALIBRATION] == digest and REVISION_OF in env.registry.tags(revision)

        def gated():
            runs = instance.get_runs(dg.RunsFilter(tags={"modelcd/candidate": revision.key}, statuses=list(done)))
            return runs[0] if runs else None

        gate_run = wait("the registry sensor's gated run of the revision finished", gated, 420)
    finally:
        stop_process(stack)
        log.close()
    rows, problems = latest_gate_rows(instance, revision)
    assert gate_run.status == dg.DagsterRunStatus.SUCCESS or problems, gate_run.status
    assert {r.gate for r in rows} >= {"int8_agrees_with_fp32", "accuracy_within_tolerance"}, (rows, problems)
