"""A `modelcd gate` or `modelcd rollback` process killed at each named failpoint, then the next command.

One module-scoped state folder; each test kills a real CLI process (MODELCD_FAILPOINT), checks what the crash left
(the alias, the tags, the run left STARTED, the registry sensor), recovers, and runs the same command again: in this
process, to save an interpreter's start, except where the new process itself must free what the dead one held.
Every candidate after the first is the same adapter registered again, so it reuses the first one's build.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import dagster as dg
import pytest

from modelcd_assets.api import read_gates
from modelcd_assets.cli import main
from modelcd_assets.defs.sensors.registry_sensor import registry_sensor
from modelcd_assets.lib.operations.failpoints import ENV as FAILPOINT
from modelcd_assets.lib.operations.instance_config import PROMOTION_POOL
from modelcd_assets.lib.operations.settings import apply_local_defaults
from modelcd_assets.lib.release.registry import PREVIOUS_PRODUCTION, PROMOTION, ROLLED_BACK, CandidateRef
from modelcd_assets.lib.release.rollback import rollback_order
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.run_recovery import CANDIDATE, PID, PROCESS, ROLLBACK, process_gone, process_tags, recover_dead_runs
from modelcd_assets_tests.conftest import make_env

pytestmark = pytest.mark.slow
MODEL = "tiny-crash"
KILLED = -signal.SIGKILL  # the return code of a process a failpoint killed
# Throughput and the accuracy bootstrap at their cheapest: what this module judges is the alias, not the gates.
POLICY = """\
accuracy:
  absolute_floor: 0.6
  tolerance_points: 5
  alpha: 1.0e-9
  bootstrap_samples: 200
quantization:
  variant: dynamic
throughput:
  min_ratio: 0.01
  p99_slo_ms: 100000
  pairs: 6
  max_pairs: 6
  on_inconclusive: pass
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    e = make_env(tmp_path_factory.mktemp("crash") / "home", mp)
    apply_local_defaults(dict(e.env))  # the instance's dagster.yaml, with the promotion pool's limit of 1, as the CLI sees it
    e.policy(MODEL, POLICY)
    yield e
    mp.undo()


@pytest.fixture(scope="module")
def instance(env):
    with dg.DagsterInstance.get() as inst:  # DAGSTER_HOME: the storage the CLI processes use
        yield inst


@pytest.fixture(scope="module")
def base(env, tiny_trained):
    return env.registry.register(tiny_trained, "tiny-base", role="base")


def modelcd(env, *args: str, failpoint: str | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != FAILPOINT} | env.env
    if failpoint:
        environ[FAILPOINT] = failpoint
    return subprocess.run([sys.executable, "-m", "modelcd_assets.cli", *args], env=environ, capture_output=True, text=True, timeout=600)


def modelcd_here(capsys, *args: str) -> tuple[int, str, str]:
    """`modelcd` in this process, saving a new interpreter's start; exit code, stdout, stderr."""
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def killed_run(instance, key_tag: str, key: str) -> dg.DagsterRun:
    """The one run the killed process left unfinished."""
    records = instance.get_run_records(dg.RunsFilter(tags={key_tag: key}, statuses=[dg.DagsterRunStatus.STARTED]))
    assert len(records) == 1, [r.dagster_run.status for r in records]
    return records[0].dagster_run


def status(instance, run) -> dg.DagsterRunStatus:
    return instance.get_run_by_id(run.run_id).status


def tags(env, version: str) -> dict[str, str]:
    return env.registry.tags(CandidateRef(MODEL, version))


def chain(env) -> list[str]:
    """Production, then each modelcd.previous_production back to the first promotion."""
    found, version = [], env.registry.production(MODEL).version
    while version and version not in found:
        found.append(version)
        version = tags(env, version).get(PREVIOUS_PRODUCTION)
    return found


def promoted_versions(env) -> set[str]:
    return {r.version for r in env.registry.versions(MODEL) if PROMOTION in env.registry.tags(r)}


def sensor_launches(env, instance) -> list[str]:
    """The run keys registry_sensor would launch now, from an empty cursor: the worst case."""
    resource = MlflowRegistryResource(tracking_uri=env.env["MLFLOW_TRACKING_URI"], artifact_location=env.env["MODELCD_MLFLOW_ARTIFACTS"])
    result = registry_sensor(dg.build_sensor_context(cursor=None, instance=instance, resources={"registry": resource}))
    return [r.run_key for r in result.run_requests or []]


def slot_holders(instance) -> set[str]:
    return instance.event_log_storage.get_concurrency_info(PROMOTION_POOL).active_run_ids


def crash_gate(env, instance, adapter, point: str) -> tuple[CandidateRef, dg.DagsterRun]:
    """Register the adapter again and kill `modelcd gate` on it at point; the run it left STARTED."""
    ref = env.registry.register(adapter, MODEL)
    proc = modelcd(env, "gate", MODEL, ref.version, failpoint=point)
    assert proc.returncode == KILLED, proc.stderr[-3000:]
    run = killed_run(instance, CANDIDATE, ref.key)
    assert sensor_launches(env, instance) == []  # the candidate has its partition: the sensor does not launch it again
    return ref, run


@pytest.fixture(scope="module")
def adapter(base, tiny_adapters):
    return tiny_adapters["good"]


def test_a_run_is_closed_only_when_its_process_is_gone():
    mine = process_tags()
    scope, _, started = mine[PROCESS].rpartition("/")
    assert mine[PID] == str(os.getpid()) and scope and started
    assert not process_gone(mine)
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert process_gone({**mine, PID: child.stdout.strip()})
    assert process_gone({**mine, PROCESS: f"{scope}/1"})  # this pid, now another process's
    # Another machine's or container's pid cannot be seen from here: left alone.
    assert not process_gone({**mine, PID: child.stdout.strip(), PROCESS: f"another-boot/{started}"})


def test_killed_mid_quantization_then_the_same_gate_rebuilds_and_promotes(env, instance, adapter, capsys):
    ref, run = crash_gate(env, instance, adapter, "mid_quantization")
    assert env.registry.production(MODEL) is None and promoted_versions(env) == set()

    code, out, err = modelcd_here(capsys, "gate", MODEL, ref.version)
    assert code == 0, out[-3000:]
    assert (
        f"modelcd: run {run.run_id} (gate {ref.key}) was left STARTED by pid {run.tags[PID]}, which is gone: marked it failed; "
        f"production of {MODEL} is none\n" in err
    )
    assert status(instance, run) == dg.DagsterRunStatus.FAILURE
    assert chain(env) == [ref.version] and promoted_versions(env) == {ref.version}


def test_killed_before_promotion_holds_the_pool_slot_until_the_next_gate_frees_it(env, instance, adapter):
    before = env.registry.production(MODEL)
    ref, run = crash_gate(env, instance, adapter, "before_promotion")
    assert env.registry.production(MODEL) == before and PROMOTION not in tags(env, ref.version)
    assert slot_holders(instance) == {run.run_id}  # without recovery, every later promotion would wait on it forever

    again = modelcd(env, "gate", MODEL, ref.version)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"modelcd: run {run.run_id} (gate {ref.key}) was left STARTED" in again.stderr
    assert status(instance, run) == dg.DagsterRunStatus.FAILURE and slot_holders(instance) == set()
    assert chain(env) == [ref.version, before.version]
    assert json.loads(tags(env, ref.version)[PROMOTION])["run_id"] != run.run_id


def test_killed_after_the_tags_the_dangling_promotion_tags_are_removed(env, instance, adapter, capsys):
    before = env.registry.production(MODEL)
    history = chain(env)
    ref, run = crash_gate(env, instance, adapter, "after_tags")
    assert env.registry.production(MODEL) == before
    # The crash left the candidate looking promoted, in the very tag rollback walks.
    assert (
        tags(env, ref.version)[PREVIOUS_PRODUCTION] == before.version
        and json.loads(tags(env, ref.version)[PROMOTION])["run_id"] == run.run_id
    )

    [line] = recover_dead_runs(instance)
    assert line.endswith(
        f"; production of {MODEL} is {before.version}; removed the promotion tags on {ref.uri}, which the alias never reached"
    )
    assert status(instance, run) == dg.DagsterRunStatus.FAILURE and slot_holders(instance) == set()
    assert PROMOTION not in tags(env, ref.version) and PREVIOUS_PRODUCTION not in tags(env, ref.version)
    assert recover_dead_runs(instance) == []

    code, out, err = modelcd_here(capsys, "gate", MODEL, ref.version)
    assert code == 0, out[-3000:]
    assert "was left STARTED" not in err
    assert chain(env) == [ref.version, *history]


def test_killed_after_the_alias_moved_the_same_gate_ends_promoted_without_a_second_move(env, instance, adapter, capsys):
    before = env.registry.production(MODEL)
    history = chain(env)
    ref, run = crash_gate(env, instance, adapter, "after_alias")
    # The alias is at the candidate only because every gate passed on it.
    assert env.registry.production(MODEL) == ref and read_gates(instance, ref.key).promotable
    assert chain(env) == [ref.version, *history]

    [line] = recover_dead_runs(instance)
    assert line.endswith(f"; production of {MODEL} is {ref.version}")  # a promotion that took effect: nothing removed
    assert status(instance, run) == dg.DagsterRunStatus.FAILURE and slot_holders(instance) == set()

    code, out, _ = modelcd_here(capsys, "gate", MODEL, ref.version)
    assert code == 0 and "PROMOTED" in out, out[-3000:]
    assert env.registry.production(MODEL) == ref
    # The re-run must not record the candidate as its own previous production...
    assert tags(env, ref.version)[PREVIOUS_PRODUCTION] == before.version
    assert chain(env) == [ref.version, *history]
    # ...and is judged against the version it replaced, as the crashed run was, never against itself (issue 17).
    from modelcd_assets.lib.release.candidate import CandidateRecord

    record = CandidateRecord.of(env.home, CandidateRef(MODEL, ref.version))
    assert (record.production_version, record.regated_production, record.baseline_ref) == (before.version, True, ref)


def test_rollback_killed_before_the_alias_moved_back_is_undone_and_the_rerun_completes(env, instance, capsys):
    bad = env.registry.production(MODEL)
    target = rollback_order(env.registry, bad)[0]  # every version here passed its gates: the first in order is the target
    proc = modelcd(env, "rollback", MODEL, failpoint="mid_rollback")
    assert proc.returncode == KILLED, proc.stderr[-3000:]
    run = killed_run(instance, ROLLBACK, f"{MODEL}:{bad.version}")
    assert env.registry.production(MODEL) == bad and ROLLED_BACK in tags(env, bad.version)  # rolled back from, yet production

    [line] = recover_dead_runs(instance)
    assert line.endswith(f"; production of {MODEL} is {bad.version}; removed the rolled-back tag on {bad.uri}, which is still production")
    assert status(instance, run) == dg.DagsterRunStatus.FAILURE and slot_holders(instance) == set()
    assert ROLLED_BACK not in tags(env, bad.version)

    code, out, err = modelcd_here(capsys, "rollback", MODEL)
    assert code == 0 and f"production rolled back from {bad.version} to {target.version}" in out, (out, err[-3000:])
    assert env.registry.production(MODEL) == target and ROLLED_BACK in tags(env, bad.version)
    assert json.loads(tags(env, target.version)[PROMOTION])["rollback_from"] == bad.version
