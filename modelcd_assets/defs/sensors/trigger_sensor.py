"""trigger_sensor: each model's feedback triggers, evaluated on Prometheus every tick: the policy's slo: section (production
rolled back after slo.consecutive_failures failing evaluations in a row) and its `triggers:` list.

A trigger that has held for its `for:` fires once for the version it watches, and the action it names is launched as a
run keyed by the model, the version, the trigger and the moment its condition started holding, with its value, threshold
and PromQL in the run's tags and config: rollback (rollback_production), abort_rollout (advance_rollout's abort), regate
(the gated job on production again), recalibrate (calibrate, on the newest sampled live texts, written 0600 under the
state folder) or run_job (any job of this sensor's list). Prometheus unreachable is a skip that keeps the cursor; a
trigger that cannot be read (a metric its task lacks, a job it cannot launch) is named in the tick's log, every tick.
"""

import json
import os
import time
from pathlib import Path

import dagster as dg

from modelcd_assets.defs.assets.production_rollback import rollback_run_config
from modelcd_assets.defs.assets.rollout import rollout_run_config
from modelcd_assets.defs.jobs import advance_rollout, calibrate, gate_candidate, rollback_production
from modelcd_assets.defs.schedules import judge_live_traffic, recheck_production
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.slo import PrometheusUnavailable
from modelcd_assets.lib.judging.trigger_policy import ABORT_ROLLOUT, PRODUCTION, RECALIBRATE, REGATE, ROLLBACK, RUN_JOB, TriggerPolicy
from modelcd_assets.lib.judging.triggers import Held, Reading, firing_name, read_trigger, step
from modelcd_assets.lib.operations import traffic_log
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.release.rollout import ABORT, read_state
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets.resources.prometheus import PrometheusResource
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource

TRIGGER_JOBS = [rollback_production, advance_rollout, gate_candidate, calibrate, judge_live_traffic, recheck_production]
TRIGGER_TAG = "modelcd/trigger"


def _traffic_file(state: LocalStateResource, model: str, texts: list[str]) -> Path:
    """The newest sampled live texts as a calibration source: JSON lines, 0600, under the state folder."""
    path = state.layout.calibration_from_traffic(model, int(time.time()))
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.writelines(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts)
    return path


def fired_request(
    trigger: TriggerPolicy, key: str, ref: CandidateRef, held: Held, reading: Reading, rolling, state: LocalStateResource
) -> dg.RunRequest:
    """The run a fired trigger calls for, its values in its config; ModelcdError when it cannot be launched."""
    why = {
        "trigger": trigger.label,
        "value": reading.value,
        "threshold": trigger.threshold,
        "held_since": held.since,
        "readings_in_a_row": held.count,
        "promql": reading.promql,
    }
    if held.evaluations:
        why["slo_evaluations"] = list(held.evaluations)
    common = {"run_key": f"trigger:{ref.key}:{key}:{held.since}", "tags": {TRIGGER_TAG: f"{ref.key}:{key}"}}
    if trigger.action == ROLLBACK:
        config = rollback_run_config(ref.name, ref.version, f"trigger_sensor: {trigger.label}", why)
        return dg.RunRequest(job_name=rollback_production.name, run_config=config, **common)
    if trigger.action == ABORT_ROLLOUT:
        config = rollout_run_config(ABORT, rolling.sequence, {"trigger": why}, "trigger_sensor", trigger.label)
        return dg.RunRequest(job_name=advance_rollout.name, partition_key=ref.key, run_config=config, **common)
    if trigger.action == REGATE:
        return dg.RunRequest(job_name=gate_candidate.name, partition_key=ref.key, **common)
    if trigger.action == RECALIBRATE:
        records = traffic_log.window(state.root, ref.name, 10_000)
        if not records:
            raise ModelcdError(f"{ref.name} has no sampled live traffic to recalibrate on (serving.sample_ratio 0, or nothing served yet)")
        source = _traffic_file(state, ref.name, [r.text for r in records])
        config = {"ops": {"calibration_set": {"config": {"model": ref.name, "source": str(source)}}}}
        return dg.RunRequest(job_name=calibrate.name, run_config=config, **common)
    assert trigger.action == RUN_JOB
    names = [j.name for j in TRIGGER_JOBS]
    if trigger.job not in names:
        raise ModelcdError(f"run_job names {trigger.job!r}, which is not a job trigger_sensor can launch ({', '.join(names)})")
    return dg.RunRequest(job_name=trigger.job, **common)


@dg.sensor(jobs=TRIGGER_JOBS, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def trigger_sensor(
    context: dg.SensorEvaluationContext,
    registry: MlflowRegistryResource,
    policy: PolicyResource,
    prometheus: PrometheusResource,
    state: LocalStateResource,
) -> dg.SensorResult:
    """Cursor: per model and trigger, the version watched, since when its condition has held, whether it fired, its last value."""
    cursor = json.loads(context.cursor) if context.cursor else {}
    reg = registry.registry()
    requests, notes = [], []
    now = time.time()
    for model in reg.candidate_models():
        try:
            model_policy = policy.for_model(model)
        except ModelcdError as e:
            notes.append(f"{model}: triggers not evaluated, its policy is invalid ({e})")
            continue
        production = reg.production(model)
        try:
            rolling = read_state(reg, model)
        except ModelcdError as e:
            notes.append(f"{model}: its rollout state is not followed ({e})")
            rolling = None
        for i, trigger in enumerate(model_policy.feedback_triggers):
            key = firing_name(trigger, i)
            if trigger.reads == PRODUCTION:
                ref = production
            else:
                ref = CandidateRef(model, rolling.version) if rolling is not None and rolling.serving_share else None
            if ref is None:
                continue
            try:
                reading = read_trigger(prometheus.url, trigger, model, ref.version, reg.task(ref), model_policy.slo)
            except PrometheusUnavailable as e:
                return dg.SensorResult(skip_reason=f"{e}; triggers not evaluated, nothing launched", cursor=context.cursor)
            except ModelcdError as e:
                notes.append(f"{model} {trigger.label}: not evaluated ({e})")
                continue
            held, fire = step(Held.of(cursor.get(model, {}).get(key), ref.version), trigger, reading, now)
            in_a_row = f", {held.count}/{trigger.times} readings in a row" if trigger.times > 1 else ""
            notes.append(f"{model} v{ref.version} {trigger.label}: {reading.shown}{in_a_row}{' FIRED' if fire else ''}")
            if fire:
                try:
                    requests.append(fired_request(trigger, key, ref, held, reading, rolling, state))
                except ModelcdError as e:  # not fired after all: said again every tick while it holds
                    notes.append(f"{model} {trigger.label}: holds, but its action cannot run ({e})")
                    held = Held(held.version, held.since, False, held.count, held.evaluations)
            cursor.setdefault(model, {})[key] = {**held.as_dict(), "value": reading.value}
    context.log.info(" | ".join(notes) or "no model has a production version or a rollout")
    new_cursor = json.dumps(cursor, sort_keys=True)
    if not requests:
        return dg.SensorResult(skip_reason=" | ".join(notes) or "no model has a production version or a rollout yet", cursor=new_cursor)
    return dg.SensorResult(run_requests=requests, cursor=new_cursor)
