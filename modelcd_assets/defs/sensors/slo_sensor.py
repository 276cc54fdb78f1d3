"""slo_sensor: judges each production version's SLOs from Prometheus, and rolls back after N failures in a row."""

import json

import dagster as dg

from modelcd_assets.defs.assets.production_rollback import rollback_run_config
from modelcd_assets.defs.jobs import rollback_production
from modelcd_assets.lib.judging.slo import FAIL, PASS, PrometheusUnavailable
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets.resources.prometheus import PrometheusResource
from modelcd_assets.resources.registry import MlflowRegistryResource


def rollback_request(model: str, version: str, verdicts: list[dict], sequence: int) -> dg.RunRequest:
    return dg.RunRequest(
        run_key=f"rollback:{model}:{version}:{sequence}",
        run_config=rollback_run_config(model, version, "slo_sensor", {"slo_evaluations": verdicts}),
        tags={"modelcd/rollback": f"{model}:{version}"},
    )


@dg.sensor(job=rollback_production, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def slo_sensor(
    context: dg.SensorEvaluationContext, registry: MlflowRegistryResource, policy: PolicyResource, prometheus: PrometheusResource
) -> dg.SensorResult:
    """Cursor: per model, the production version judged and its failing evaluations in a row (with their values).

    Inconclusive evaluations (too few requests, no data) neither count nor reset the streak. Prometheus
    unreachable is a skip: nothing moves on what it cannot see.
    """
    cursor = json.loads(context.cursor) if context.cursor else {}
    reg = registry.registry()
    requests, notes = [], []
    for model in reg.candidate_models():
        prod = reg.production(model)
        if prod is None:
            continue
        slo = policy.for_model(model).slo
        state = cursor.get(model, {})
        if state.get("version") != prod.version:
            state = {"version": prod.version, "failures": [], "rollbacks": state.get("rollbacks", 0)}
        try:
            verdict = prometheus.evaluate(model, prod.version, slo, reg.task(prod))
        except PrometheusUnavailable as e:
            return dg.SensorResult(skip_reason=f"{e}; SLOs not judged, nothing rolled back", cursor=context.cursor)
        record = {"outcome": verdict.outcome, "values": verdict.values, "reasons": verdict.reasons, "queries": verdict.queries}
        if verdict.outcome == FAIL:
            state["failures"] = [*state["failures"], record][-slo.consecutive_failures :]
        elif verdict.outcome == PASS:
            state["failures"] = []
        streak = len(state["failures"])
        notes.append(
            f"{model} v{prod.version}: {verdict.outcome} ({'; '.join(verdict.reasons) or 'within SLO'}),"
            f" {streak}/{slo.consecutive_failures} failures in a row"
        )
        if streak >= slo.consecutive_failures and not state.get("rollback_requested"):
            state["rollbacks"] = state.get("rollbacks", 0) + 1
            requests.append(rollback_request(model, prod.version, state["failures"], state["rollbacks"]))
            state["rollback_requested"] = True
        cursor[model] = state
    context.log.info(" | ".join(notes) or "no model has a production version")
    new_cursor = json.dumps(cursor, sort_keys=True)
    if not requests:
        return dg.SensorResult(skip_reason=" | ".join(notes) or "no model has a production version yet", cursor=new_cursor)
    return dg.SensorResult(run_requests=requests, cursor=new_cursor)
