"""live_traffic: the newest window of each production model's sampled traffic, judged for input drift against the reference data."""

import json
from datetime import datetime, timezone

import dagster as dg

from modelcd_assets.lib.errors import ModelcdError, RegistryUnavailable
from modelcd_assets.lib.judging.gates import FAIL, INCONCLUSIVE, Verdict, judge_live_drift
from modelcd_assets.lib.operations import traffic_log
from modelcd_assets.lib.release.monitoring import judge_each, recorded
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.task import task_of
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource

# The split production was validated on, as the drift gate's reference_sample defaults to.
REFERENCE_SPLIT = "evaluation"
LIVE_DRIFT_TAG = "modelcd.live_drift"  # on a production version whose live traffic drifted: when, how much, in what, as JSON


def _judge(model: str, prod: CandidateRef, state: LocalStateResource, policy: PolicyResource) -> Verdict:
    drift = policy.for_model(model).drift
    records = traffic_log.window(state.root, model, drift.live_window)
    if len(records) < drift.live_min_records:
        return judge_live_drift(None, drift, len(records))
    record = state.record(prod)  # production's task: its tokenizer counts the tokens, its evaluation data is the reference
    return judge_live_drift(task_of(record.task).live_input_drift(record, state, [r.text for r in records]), drift, len(records))


def _table(model: str, prod: CandidateRef, v: Verdict) -> str:
    rows = "\n".join(
        f"| {k} | {d:.3f} | {'yes' if k in v.numbers.get('drifted', []) else 'no'} |"
        for k, d in (v.numbers.get("input_drift") or {}).items()
    )
    head = f"**{model}** (production v{prod.version}): {v.status}, {v.measured}\n\n{v.reason}"
    return head + (f"\n\n| descriptor | normed Wasserstein | drifted |\n|---|---|---|\n{rows}" if rows else "")


@dg.asset(group_name="monitoring", kinds={"evidently"})
def live_traffic(
    context: dg.AssetExecutionContext, registry: MlflowRegistryResource, policy: PolicyResource, state: LocalStateResource
) -> dg.MaterializeResult:
    """Input drift of what production serves, by the drift gate's Evidently test and thresholds, against the split it was validated on.

    A drift is shown here, tagged on the production version in the registry, and written where the server exports it to
    Prometheus. Too little traffic, or a model that could not be checked, is inconclusive: never reported as no drift.
    """
    reg = registry.registry()
    productions = reg.productions()
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")

    def export(model: str, prod: CandidateRef, v: Verdict) -> None:
        """Where the server exports it to Prometheus."""
        traffic_log.write_live_drift(
            state.root,
            model,
            traffic_log.LiveDrift(
                time=now,
                version=prod.version,
                judged="input_drifted_share" in v.numbers,
                detected=v.status == FAIL,
                input_drifted_share=v.numbers.get("input_drifted_share"),
                descriptors=list(v.numbers.get("drifted", [])),
                records=int(v.numbers.get("records", 0)),
                reason=v.reason,
            ),
        )

    # ModelcdError, FileNotFoundError: e.g. production was never gated in this state folder.
    verdicts = judge_each(
        productions,
        lambda model, prod: _judge(model, prod, state, policy),
        gate="live_drift",
        not_done="not judged",
        unable="could not check live drift of",
        errors=(ModelcdError, FileNotFoundError),
        log=context.log.info,
        then=export,
    )
    for model, v in verdicts.items():
        if v.status != FAIL:
            continue
        prod = productions[model]
        tag = {
            "time": now,
            "input_drifted_share": round(v.numbers["input_drifted_share"], 4),
            "descriptors": v.numbers["drifted"],
            "records": v.numbers["records"],
        }
        try:
            reg.set_tags(prod, {LIVE_DRIFT_TAG: json.dumps(tag, sort_keys=True)})
        except Exception as e:
            raise RegistryUnavailable(
                f"live traffic of {prod.uri} drifted ({v.reason}), but the registry at {reg.shown_uri} refused the "
                f"{LIVE_DRIFT_TAG} tag: {type(e).__name__}: {e}; the server exports the drift already, re-materialize "
                "live_traffic when the registry answers to record it there"
            ) from e
    drifted = sorted(m for m, v in verdicts.items() if v.status == FAIL)
    return dg.MaterializeResult(
        metadata={
            "judged_at": now,
            "models": len(verdicts),
            "drifted": ", ".join(drifted) or "none",
            "not_judged": ", ".join(sorted(m for m, v in verdicts.items() if v.status == INCONCLUSIVE)) or "none",
            "reference_split": REFERENCE_SPLIT,
            "live_drift": dg.MetadataValue.md(
                "\n\n".join(_table(m, productions[m], v) for m, v in verdicts.items())
                or "no registered model has a production version: no live traffic to judge"
            ),
            # What live_traffic_has_not_drifted judges, exactly as decided here.
            "verdicts": dg.MetadataValue.json(recorded(productions, verdicts)),
        }
    )
