"""modelcd from Python: register a version, gate it on the Dagster instance you choose, read every gate's result.

docs/python-api.md shows each in a few lines; modelcd_assets_tests/test_python_api_doc.py runs that page as written.
The `modelcd` CLI and the registry sensor go through these same functions and the same job.
"""

from __future__ import annotations

import dagster as dg

from modelcd_assets import gate_results
from modelcd_assets.defs.jobs import GATE_JOB
from modelcd_assets.gate_results import GateDecision, GateGraph
from modelcd_assets.launch import (
    BAD_INPUT,
    BLOCKED,
    ERROR,
    PROMOTED,
    REGISTRY_UNAVAILABLE,
    SUPERSEDED,
    Calibration,
    GateRun,
    add_candidate,
    code_location_graph,
    run_calibration,
    run_gate,
)
from modelcd_assets.lib.judging.promotion import GateRecord
from modelcd_assets.lib.release.registry import CandidateRef, Registry

__all__ = [
    "BAD_INPUT",
    "BLOCKED",
    "ERROR",
    "PROMOTED",
    "REGISTRY_UNAVAILABLE",
    "SUPERSEDED",
    "Calibration",
    "CandidateRef",
    "GateDecision",
    "GateRecord",
    "GateRun",
    "Registry",
    "add_candidate",
    "gate_job",
    "read_gates",
    "run_calibration",
    "run_gate",
]


def gate_job() -> dg.JobDefinition:
    """The job the registry sensor launches for a candidate: every asset up to production_model, with its blocking gates."""
    from modelcd_assets.launch import definitions

    return definitions().resolve_job_def(GATE_JOB)


def read_gates(instance: dg.DagsterInstance, partition: str, graph: GateGraph | None = None) -> GateDecision:
    """The latest result of every required gate for one candidate (its partition key, NAME:VERSION), judged exactly as
    promotion judges it; graph defaults to the code location's."""
    return gate_results.read_gates(instance, partition, graph or code_location_graph())
