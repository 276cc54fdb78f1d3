"""The demo's rollouts: a good adapter gated while production serves live callers, then taken through its rollout's steps
(modelcd_assets/live_rollout.py)."""

from __future__ import annotations

from dataclasses import replace

from modelcd_assets.demo import Phases
from modelcd_assets.launch import PROMOTED, ROLLING_OUT, GateRun
from modelcd_assets.lib.release.registry import CandidateRef, Registry
from modelcd_assets.lib.release.rollout_state import PROMOTED as ROLLED_OUT
from modelcd_assets.live_rollout import LiveServer, follow_rollout


def gate_and_roll_out(
    reg: Registry,
    phases: Phases,
    task: str,
    label: str,
    ref: CandidateRef,
    live: LiveServer,
    api: str,
    batches: list,
    concurrency: int = 2,
) -> GateRun:
    """ref gated once the live server serves production ('serve production', then 'gate LABEL'); when its offline gates
    passed and its rollout started, the load generator's callers and rollout_sensor take it through its steps ('roll out
    LABEL'). The run's outcome is then promoted, or the rollout's status."""
    # Production is served before the gate starts: a step's clock starts when the gated run writes the rollout state, and
    # the callers, started once the gate has passed, must find a server ready then.
    with phases.timed(task, "serve production"):
        live.wait_ready()
    run = phases.gate(task, f"gate {label}", ref)
    if run.outcome != ROLLING_OUT:
        return run
    with phases.timed(task, f"roll out {label}") as entry:
        live.load(api, batches, concurrency)
        state = follow_rollout(reg, ref, live)
        entry["status"] = state.status
    if state.status == ROLLED_OUT:
        return replace(run, outcome=PROMOTED, error="")
    return replace(run, outcome=f"rollout {state.status}", error=state.reason)
