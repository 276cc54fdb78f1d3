"""Live-only faults: a candidate that passes every offline gate and regresses only on live traffic, taken through a rollout
in the sandbox (a real `modelcd serve --chaos`, a real Prometheus, callers speaking the task's API) and expected to be
stopped at a shadow or canary step: aborted, or paused when too few requests reached it. A clean copy rolled out the same
way is a control: it must reach production.

The rollout is the model's policy's own section, each step set to STEP_SECONDS (the report's notes give the policy's
durations); a policy without one is rolled out through default_rollout(). A sandbox opened with live_step_seconds sets
every step to that instead: a real causal LM on 2 cores answers too few callers in 10 s for a step to judge (make
bench-rollout measured 3 shadow pairs of the 10 its demo policy needs), and its rollouts would all pause. Each step may
go on gathering samples up to MAX_FOR_STEPS times its length (max_for): a canary step passes a critical rate only once
it is bounded within its limit, which takes a few hundred answers an arm at the default one point. The offline classes
and controls are gated without the section (offline_only): each of them ends at its offline gates, as it did before
rollouts existed.
"""

from __future__ import annotations

import contextlib

from modelcd_assets import launch
from modelcd_assets.faults.builders import identical
from modelcd_assets.faults.outcomes import ERROR, PROMOTED, ROLLOUT_ABORTED, ROLLOUT_PAUSED, Outcome
from modelcd_assets.faults.sandbox import Sandbox
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.rollout_policy import PROMOTE, duration_seconds
from modelcd_assets.lib.presentation.rollout_report import fewest_samples
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.release.rollout import ABORT
from modelcd_assets.lib.release.rollout_state import ABORTED, PAUSED, RolloutState
from modelcd_assets.lib.release.rollout_state import PROMOTED as ROLLED_OUT
from modelcd_assets.lib.tasks.names import declaration_of
from modelcd_assets.live_rollout import follow_rollout, live_server, rollout_history

# Every step of a live class lasts this long, whatever the policy says: a policy's minutes would make each class take an
# hour, and a step of a few seconds may end before the callers, started once the gates passed, have asked anything.
STEP_SECONDS = 10.0
DEFAULT_STEP_SECONDS = 8.0  # default_rollout's, where the sandbox sets none
MAX_FOR_STEPS = 4.0  # a step without a verdict for want of samples goes on up to this many times its length


def default_rollout(task: str, seconds: float = DEFAULT_STEP_SECONDS) -> dict:
    """The fault sandbox's rollout for a policy without one. A shadow copy is answered after production's answer, beside
    the next requests, so on few cores its timings are not the candidate's own: the shadow step judges every metric but
    the shifts (the pairs, the rates), and the canary step, where each arm answers callers of its own, judges all of them
    (the demo's policies are built the same way)."""
    unshifted = [m.name for m in declaration_of(task).live_metrics if m.kind != "shift"]
    return {
        "min_samples": 20,
        "steps": [
            {"shadow": 0.5, **_lasting(seconds), "metrics": unshifted},
            {"canary": 0.5, **_lasting(seconds)},
            PROMOTE,
        ],
    }


def _lasting(seconds: float) -> dict:
    return {"for": f"{seconds:g}s", "max_for": f"{MAX_FOR_STEPS * seconds:g}s"}


def sandbox_rollout(policy: dict, task: str, seconds: float | None = None) -> tuple[dict, str]:
    """The rollout section the live classes run under, from the model's policy (a dict as its file holds it), each step
    `seconds` long (None: the policy's steps STEP_SECONDS, the default rollout's DEFAULT_STEP_SECONDS), and what was changed,
    in words."""
    section = policy.get("rollout")
    if not section:
        return default_rollout(task, seconds or DEFAULT_STEP_SECONDS), (
            "the policy has no rollout section: the live classes ran under the fault sandbox's default rollout"
            + (f", its steps {seconds:g} s each" if seconds else "")
        )
    each = seconds or STEP_SECONDS
    steps, changed = [], []
    for step in section.get("steps", []):
        if isinstance(step, dict) and "for" in step:
            if (duration_seconds(step["for"]), duration_seconds(step.get("max_for", step["for"]))) != (each, MAX_FOR_STEPS * each):
                changed.append(f"{step['for']}" + (f" up to {step['max_for']}" if "max_for" in step else ""))
            step = {**step, **_lasting(each)}
        steps.append(step)
    said = (
        f"the live classes' steps were set to {each:g} s each, up to {MAX_FOR_STEPS * each:g} s while a metric wants samples"
        f" (the policy's: {', '.join(changed)})"
        if changed
        else ""
    )
    return {**section, "steps": steps}, said


def _policy(sb: Sandbox) -> dict:
    import yaml

    return (yaml.safe_load(sb.policy_path.read_text()) if sb.policy_path.is_file() else None) or {}


def live_notes(sb: Sandbox) -> list[str]:
    """What the report says of the sandbox's rollouts: the section the live classes run under, and the offline ones without it."""
    policy = _policy(sb)
    _, said = sandbox_rollout(policy, sb.task, sb.live_step_seconds)
    offline = "the offline classes and controls were gated without the policy's rollout section: each ends at its offline gates"
    return [n for n in (said, offline if policy.get("rollout") else "") if n]


def rolling_out(sb: Sandbox) -> contextlib.AbstractContextManager[None]:
    """The sandbox's policy with the live classes' rollout section (live_notes says what it changed), and the server
    following each step within a second."""

    def edit(policy: dict) -> None:
        policy["rollout"] = sandbox_rollout(policy, sb.task, sb.live_step_seconds)[0]
        policy["serving"] = {**(policy.get("serving") or {}), "poll_seconds": 1}

    return sb.policy_edited(edit)


def offline_only(sb: Sandbox) -> contextlib.AbstractContextManager[None]:
    """The sandbox's policy without its rollout section while the block runs: an offline class or control ends at its
    offline gates (live_notes says so)."""
    return sb.policy_edited(lambda policy: policy.pop("rollout", None))


def _outcome(state: RolloutState, history: list[dict]) -> Outcome:
    last = history[-1] if history else {}
    analysis = last.get("analysis") or {}
    fewest = fewest_samples(analysis)
    where = f"step {state.step + 1} ({state.kind} {last.get('share', state.share):g})"
    took = f", the fewest samples an arm had {fewest:g}" if fewest is not None else ""
    failed = [f"{m['metric']} {m['outcome']}" for m in analysis.get("metrics", []) if m.get("outcome") not in ("pass", None)]
    detail = f"at {where}{took}: " + "; ".join(filter(None, [", ".join(failed), state.reason]))
    if state.status == ROLLED_OUT:
        return Outcome(PROMOTED, detail=f"through {len(history)} steps on live traffic")
    if state.status == ABORTED:
        return Outcome(ROLLOUT_ABORTED, detail=detail)
    if state.status == PAUSED:
        return Outcome(ROLLOUT_PAUSED, detail=detail)
    return Outcome(ERROR, detail=f"the rollout ended {state.status}: {state.describe()}")


def _follow_seconds(sb: Sandbox) -> float:
    """How long a live class's rollout is followed before it counts as stuck: its steps' longest time twice over, and two
    minutes."""
    section, _ = sandbox_rollout(_policy(sb), sb.task, sb.live_step_seconds)
    steps = [duration_seconds(s.get("max_for", s["for"])) for s in section.get("steps", []) if isinstance(s, dict) and "for" in s]
    return max(180.0, 120.0 + 2 * sum(steps))


def roll_out(
    sb: Sandbox,
    ref: CandidateRef,
    fault: dict | None = None,
    traffic: str | None = "traffic_current",
    load: tuple[str, list] | None = None,
) -> Outcome:
    """ref gated under the live classes' rollout while production serves, then taken through its steps: with `fault` set
    on the server's chaos hook for ref, and callers asking the task's API on the `traffic` split (None: no callers at all),
    or asking `load` instead, as FaultSuite.live_load gives it: (api, requests). A rollout left paused is aborted
    afterwards, so that the next class starts from none."""
    from modelcd_assets.faults.catalog import suite_of

    suite = suite_of(sb.task)
    if suite.live_load is None:
        raise ModelcdError(f"the {sb.task} fault suite has no live load (FaultSuite.live_load): its rollouts cannot be judged")
    if load is not None and traffic is not None:
        raise ModelcdError(f"a rollout's callers ask either the {traffic!r} split or the requests given, not both")
    folder = sb.work / "live" / ref.version
    with rolling_out(sb), sb.active(), live_server(sb.name, folder, sb.env, chaos=fault is not None) as live:
        # Ready before the gate: a step's clock starts when the gated run writes the rollout state, and a server still
        # loading production then (it loads beside the gate, slower on a busy machine) left a step with no requests at all.
        live.wait_ready(sb.production.version)
        run = sb.gate(ref)
        if run.outcome != launch.ROLLING_OUT:
            return sb.judge(ref, run)
        if fault:
            live.inject(ref.version, **fault)
        if load is not None or traffic is not None:
            live.load(*(load or suite.live_load(sb, traffic)), suite.live_callers_at_once)
        state = follow_rollout(sb.registry, ref, live, sb.instance, timeout=_follow_seconds(sb), echo=lambda _: None)
        history = rollout_history(ref)
        if state.status == PAUSED:
            launch.run_rollout_move(ref, ABORT, state.sequence, by="fault sandbox", reason="the class is over", instance=sb.instance)
    return _outcome(state, history)


def slower_under_live_load(sb: Sandbox) -> Outcome:
    """A byte-identical copy that the server's chaos hook delays by 25 ms a request: no offline gate can see it."""
    return roll_out(sb, sb.register(identical(sb.prod, sb.work / "slower_under_live_load")), {"latency_ms": 25})


def errors_on_live_requests(sb: Sandbox) -> Outcome:
    """A byte-identical copy that fails 5% of the live requests it answers (the chaos hook), shadow copies included."""
    return roll_out(sb, sb.register(identical(sb.prod, sb.work / "errors_on_live_requests")), {"error_ratio": 0.05})


def answers_run_to_max_tokens(sb: Sandbox) -> Outcome:
    """A byte-identical copy of a causal LM that the chaos hook keeps from ending its turn before max_tokens: every live
    answer runs to its limit, what a forgotten stop costs per request."""
    return roll_out(sb, sb.register(identical(sb.prod, sb.work / "answers_run_to_max_tokens")), {"ignore_eos": True})


def too_little_traffic(sb: Sandbox) -> Outcome:
    """A byte-identical copy rolled out while no caller asks anything: no step may pass on no data."""
    return roll_out(sb, sb.register(identical(sb.prod, sb.work / "too_little_traffic")), traffic=None)
