"""gate_report: one page per candidate with the whole gate decision, written after its gated run whatever the gates decided.

It depends on nothing in the gated job on purpose: a failed blocking gate skips everything downstream of it in that
run, and this page must exist for exactly those candidates. It is materialized by its own job, which `modelcd gate`
runs after the gated job and gate_report_sensor launches after every gated run the daemon ran.
"""

import json
from urllib.parse import quote

import dagster as dg

from modelcd_assets.defs.partitions import candidates
from modelcd_assets.gate_results import GateDecision, GateGraph, read_gates
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.presentation.rollout_report import rollout_markdown
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.release.rollout import RolloutHistory, read_state
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource

ASSET_NAME = "gate_report"


def report_url(ui_url: str, partition: str) -> str:
    """The Dagster UI page of one candidate's gate report."""
    return f"{ui_url.rstrip('/')}/assets/{ASSET_NAME}?view=partitions&partition={quote(partition, safe='')}"


def decision_markdown(decision: GateDecision) -> str:
    """Every required gate as one table: the gate, its verdict as promotion reads it, what it measured, the threshold, why."""
    cell = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    rows = "\n".join(
        f"| {r.gate} | {'**' + r.shown + '**' if r.shown != 'pass' else r.shown} | {cell(r.measured)} | {cell(r.threshold)} |"
        f" {cell(r.reason)} |"
        for r in decision.records
    )
    return "| gate | verdict | measured | threshold | reason |\n|---|---|---|---|---|\n" + rows


@dg.asset(partitions_def=candidates, group_name="report", kinds={"markdown"})
def gate_report(
    context: dg.AssetExecutionContext, state: LocalStateResource, registry: MlflowRegistryResource, gate_graph: dg.ResourceParam[GateGraph]
) -> dg.MaterializeResult:
    """The candidate's gate decision on one page: every gate's verdict, measurement, threshold and reason, the production
    version it was judged against, and the policy it was judged by."""
    ref = CandidateRef.parse(context.partition_key)
    decision = read_gates(context.instance, context.partition_key, gate_graph)
    try:
        record = state.record(ref)
    except FileNotFoundError:
        record = None  # the run stopped before the candidate was fetched: the table says which gates never ran
    try:
        production = registry.registry().production(ref.name)
        in_production = "yes" if production == ref else f"no (production is version {production.version if production else 'none'})"
    except ModelcdError as e:
        in_production = f"unknown: {e}"
    verdict = "promotable: every gate passed on the current lineage" if decision.promotable else "blocked: " + "; ".join(decision.problems)
    judged_against = (record.production_version or "none (first candidate)") if record else "unknown (the candidate was never fetched)"
    policy = record.effective_policy().model_dump(mode="json") if record else {}
    page = (
        f"## {ref.uri}\n\n**{verdict}**\n\n- judged against production version: {judged_against}\n- in production now: {in_production}\n"
        f"- policy: {record.policy_source if record else 'unknown'}\n\n{decision_markdown(decision)}\n"
    )
    history = RolloutHistory(state.root, ref.name, ref.version).read()
    if record is not None and record.rollout() is not None:
        try:
            rolling = read_state(registry.registry(), ref.name)
            now = rolling.describe() if rolling is not None and rolling.version == ref.version else "no rollout of this version now"
        except ModelcdError as e:
            now = f"rollout state unknown: {e}"
        page += "\n" + rollout_markdown(history, now)
    return dg.MaterializeResult(
        metadata={
            "decision": dg.MetadataValue.md(page),
            "promotable": decision.promotable,
            "problems": dg.MetadataValue.json(decision.problems),
            "judged_against": judged_against,
            "in_production": in_production,
            "policy": dg.MetadataValue.json(json.loads(json.dumps(policy))),
        }
    )
