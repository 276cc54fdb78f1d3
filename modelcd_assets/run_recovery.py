"""Runs whose `modelcd` process died: marked failed, their pool slot freed, registry tags for an alias move that never happened removed."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import dagster as dg

from modelcd_assets.lib.operations.processes import processes
from modelcd_assets.lib.release.registry import PREVIOUS_PRODUCTION, PROMOTION, ROLLED_BACK, CandidateRef, Registry

# Tags on every run `modelcd gate` and `modelcd rollback` execute in process.
LAUNCHED_BY, CANDIDATE, ROLLBACK = "modelcd/launched_by", "modelcd/candidate", "modelcd/rollback"
# The process that ran it: pid and host for people; PROCESS, "BOOT_ID/PID_NAMESPACE/START_TICKS", tells a process apart
# from a later one with the same pid, and another machine's or container's pid from this one's.
PID, HOST, PROCESS = "modelcd/pid", "modelcd/host", "modelcd/process"
_UNFINISHED = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]


def _pid_scope() -> str:
    """This kernel's boot and this pid namespace, within which a pid and a start time name one process; empty without /proc."""
    try:
        return f"{Path('/proc/sys/kernel/random/boot_id').read_text().strip()}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""


def process_tags() -> dict[str, str]:
    """Run tags naming this process, so that a later command can tell whether it still runs."""
    me, scope = processes().get(os.getpid()), _pid_scope()
    return {PID: str(os.getpid()), HOST: socket.gethostname(), PROCESS: f"{scope}/{me.started}" if me and scope else ""}


def process_gone(tags: dict[str, str]) -> bool:
    """Whether the process named by a run's tags has exited; False when it ran where this process cannot see."""
    if not tags.get(PID, "").isdigit():
        return False
    pid = int(tags[PID])
    scope, _, started = tags.get(PROCESS, "").rpartition("/")
    if scope:
        if scope != _pid_scope():
            return False
        info = processes().get(pid)
        return info is None or str(info.started) != started
    if tags.get(HOST) != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _written_by(tag: str | None) -> str | None:
    """The run id recorded in a promotion or rollback tag, if any."""
    try:
        return json.loads(tag).get("run_id") if tag else None
    except (ValueError, AttributeError):
        return None


def _left_since(instance: dg.DagsterInstance, tags_by_version: dict[str, dict], ref: CandidateRef, since: float) -> bool:
    """Whether a move that ended after `since` took the alias away from ref, which means the alias did reach ref.

    Every move records the version it moved from on the version it moved to; a move by no known run counts as one.
    """
    for version, tags in tags_by_version.items():
        if version == ref.version or tags.get(PREVIOUS_PRODUCTION) != ref.version:
            continue
        mover = _written_by(tags.get(PROMOTION))
        record = instance.get_run_record_by_id(mover) if mover else None
        if record is None or (record.end_time or time.time()) > since:
            return True
    return False


def _undo_half_moves(instance: dg.DagsterInstance, registry: Registry, run: dg.DagsterRun, since: float) -> tuple[str, list[str]]:
    """Production of the run's model now, and the tags the run wrote for an alias move that never took effect, removed."""
    key = run.tags.get(CANDIDATE) or run.tags.get(ROLLBACK)
    if not key:
        return "", []
    name = CandidateRef.parse(key).name
    production = registry.production(name)
    tags_by_version = registry.tags_by_version(name)
    removed = []
    for version, tags in sorted(tags_by_version.items(), key=lambda kv: int(kv[0])):
        ref = CandidateRef(name, version)
        if _written_by(tags.get(PROMOTION)) == run.run_id and production != ref and not _left_since(instance, tags_by_version, ref, since):
            registry.remove_tags(ref, (PROMOTION, PREVIOUS_PRODUCTION))
            removed.append(f"the promotion tags on {ref.uri}, which the alias never reached")
        if _written_by(tags.get(ROLLED_BACK)) == run.run_id and production == ref:
            registry.remove_tags(ref, (ROLLED_BACK,))
            removed.append(f"the rolled-back tag on {ref.uri}, which is still production")
    return f"production of {name} is {production.version if production else 'none'}", removed


def recover_dead_runs(instance: dg.DagsterInstance, registry: Registry | None = None) -> list[str]:
    """Find runs `modelcd` executed in process that are unfinished while their process is gone, and close them; one line each, on stderr.

    Registry tags are repaired first: when the registry cannot be reached, the run stays as it is and the error propagates.
    """
    lines = []
    for record in instance.get_run_records(dg.RunsFilter(statuses=_UNFINISHED, tags={LAUNCHED_BY: "cli"})):
        run = record.dagster_run
        if not process_gone(run.tags):
            continue
        registry = registry or Registry.from_env()
        production, removed = _undo_half_moves(instance, registry, run, record.create_timestamp.timestamp())
        instance.report_run_failed(
            run,
            message=(
                f"the modelcd process that ran it (pid {run.tags[PID]} on {run.tags[HOST]}) is gone; "
                "marked failed by a later modelcd command"
            ),
        )
        # An in-process run killed inside a pooled step keeps its slot until freed: every later promotion would wait on it.
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        what = f"gate {run.tags[CANDIDATE]}" if CANDIDATE in run.tags else f"rollback {run.tags.get(ROLLBACK, run.job_name)}"
        line = (
            f"modelcd: run {run.run_id} ({what}) was left {run.status.value} by pid {run.tags[PID]}, which is gone: marked it failed"
            + (f"; {production}" if production else "")
            + "".join(f"; removed {r}" for r in removed)
        )
        print(line, file=sys.stderr)
        lines.append(line)
    return lines
