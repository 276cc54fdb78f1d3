"""The one entry point of the modelcd_assets code location."""

from pathlib import Path

import dagster as dg

from modelcd_assets.defs.checks.task_gates import task_gate_checks
from modelcd_assets.gate_results import GATE_GRAPH_RESOURCE, GateGraph


@dg.definitions
def defs() -> dg.Definitions:
    # The gates the declared tasks declare are built per load (defs/checks/task_gates.py): a task is found when the location is.
    location = dg.Definitions.merge(
        dg.load_from_defs_folder(path_within_project=Path(__file__).parent), dg.Definitions(asset_checks=task_gate_checks())
    )
    # The graph the gates are read by, derived once from what was just loaded: runs take it as a resource, never reload.
    graph = dg.ResourceDefinition.hardcoded_resource(
        GateGraph.of(location), "the blocking gates upstream of production_model, and their lineage"
    )
    return dg.Definitions.merge(location, dg.Definitions(resources={GATE_GRAPH_RESOURCE: graph}))
