"""rollout_sensor: judges each running rollout's step on live traffic, and asks for the move it calls for.

Each tick reads every model's signed rollout state. A running step is judged from Prometheus over the step's time so far,
the candidate against production, metric by metric (lib/judging/live_queries.py): a critical failure aborts at once; at
the step's end a pass advances (and at the promote step production_model moves the alias in the same run), a failure
aborts, and no verdict (too few samples, no data) pauses for a person. A rollout started against a production that has
since moved is superseded. Prometheus unreachable is a skip that keeps the cursor: nothing moves on what could not be
seen. Each move is a run of advance_rollout keyed by the state's sequence, so a tick repeated asks for it once.
"""

import json
import time

import dagster as dg

from modelcd_assets.defs.assets.rollout import rollout_run_config
from modelcd_assets.defs.jobs import advance_rollout
from modelcd_assets.lib.judging.live_queries import analyse_step
from modelcd_assets.lib.judging.rollout_policy import PROMOTE
from modelcd_assets.lib.judging.slo import PrometheusUnavailable
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.release.rollout import PROMOTE_AGAIN, SUPERSEDE, decide, read_state
from modelcd_assets.lib.release.rollout_state import RUNNING
from modelcd_assets.resources.prometheus import PrometheusResource
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource

ROLLOUT_TAG = "modelcd/rollout"


def move_request(ref: CandidateRef, action: str, sequence: int, analysis: dict, reason: str) -> dg.RunRequest:
    return dg.RunRequest(
        run_key=f"rollout:{ref.name}:{ref.version}:{sequence}:{action}",
        partition_key=ref.key,
        run_config=rollout_run_config(action, sequence, analysis, "rollout_sensor", reason),
        tags={ROLLOUT_TAG: f"{ref.key}:{action}"},
    )


@dg.sensor(job=advance_rollout, minimum_interval_seconds=15, default_status=dg.DefaultSensorStatus.RUNNING)
def rollout_sensor(
    context: dg.SensorEvaluationContext, registry: MlflowRegistryResource, state: LocalStateResource, prometheus: PrometheusResource
) -> dg.SensorResult:
    """Cursor: per model, the state judged last and what its analysis said (shown by `modelcd rollout status`)."""
    cursor = json.loads(context.cursor) if context.cursor else {}
    reg = registry.registry()
    requests, notes = [], []
    for model in reg.candidate_models():
        try:
            current = read_state(reg, model)
        except Exception as e:  # a state that does not verify moves nothing, and the server does not follow it either
            notes.append(f"{model}: rollout state not followed ({e})")
            continue
        if current is None or current.status != RUNNING:
            continue
        ref = CandidateRef(model, current.version)
        production = reg.production(model)
        if (production.version if production else None) != current.against:
            now = production.version if production else "nothing"
            requests.append(move_request(ref, SUPERSEDE, current.sequence, {}, f"production moved to {now} during the rollout"))
            notes.append(f"{model} v{current.version}: superseded (production is {now})")
            continue
        record = state.record(ref)
        policy = record.rollout()
        if policy is None:
            notes.append(
                f"{model} v{current.version}: rolling out, yet it has no rollout ({record.no_rollout_because()}); abort it with "
                f"'modelcd rollout abort {model}'"
            )
            continue
        step = policy.steps[current.step]
        if step.kind == PROMOTE:  # the run that reached the promote step did not promote: asked for once more
            requests.append(move_request(ref, PROMOTE_AGAIN, current.sequence, {}, "the promote step did not finish"))
            notes.append(f"{model} v{current.version}: at its promote step; production_model asked for again")
            continue
        try:
            analysis = analyse_step(
                prometheus.url, record.task, model, current.version, current.against, policy, step, time.time() - current.since
            )
        except PrometheusUnavailable as e:
            return dg.SensorResult(skip_reason=f"{e}; rollouts not judged, nothing moved", cursor=context.cursor)
        decision = decide(current, step.seconds, analysis, max_seconds=step.max_seconds)
        cursor[model] = {"sequence": current.sequence, "outcome": analysis.outcome, "score": analysis.score, "said": decision.reason}
        notes.append(f"{model} v{current.version} {step.label()}: {decision.action or 'goes on'} ({decision.reason})")
        if decision.action is not None:
            requests.append(move_request(ref, decision.action, current.sequence, analysis.as_dict(), decision.reason))
    context.log.info(" | ".join(notes) or "no rollout is running")
    new_cursor = json.dumps(cursor, sort_keys=True)
    if not requests:
        return dg.SensorResult(skip_reason=" | ".join(notes) or "no rollout is running", cursor=new_cursor)
    return dg.SensorResult(run_requests=requests, cursor=new_cursor)
