"""What goes wrong around a candidate rather than in it: the registry, a concurrent promotion, Prometheus, the calibration data.

Each condition is injected in process, as the tests do, and holds only while one gated run (or one sensor tick) lasts.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from unittest import mock

import dagster as dg

from modelcd_assets.faults.builders import identical
from modelcd_assets.faults.outcomes import ERROR, LAUNCHED, SKIPPED, Outcome
from modelcd_assets.faults.sandbox import Sandbox
from modelcd_assets.lib.registry import CandidateRef

# One-word tickets: activation ranges calibrated on them clip real traffic (measured: 96.7% INT8/FP32 agreement on the tiny test model).
COLLAPSING_CALIBRATION = ["ok", "hi", "yes", "no"]


@contextlib.contextmanager
def registry_outage(sb: Sandbox, ref: CandidateRef) -> Iterator[None]:
    """MLflow answers every get_registered_model with a database error, as a locked SQLite or a down server does."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INTERNAL_ERROR

    def outage(self, name):
        raise MlflowException("(sqlite3.OperationalError) database is locked", error_code=INTERNAL_ERROR)

    with mock.patch.object(MlflowClient, "get_registered_model", outage):
        yield


@contextlib.contextmanager
def production_moves(sb: Sandbox, ref: CandidateRef) -> Iterator[None]:
    """Another promotion lands between the candidate's last gate and its own promotion (the before_promotion failpoint)."""
    from modelcd_assets.defs.assets import production_model as step

    rival = sb.register(identical(sb.prod, sb.work / "rival"))

    def another_promotion_lands(name: str) -> None:
        if name == "before_promotion":
            sb.registry.move_production(rival, {"fault_sandbox": "a concurrent promotion"}, expected=sb.production)

    try:
        with mock.patch.object(step, "failpoint", another_promotion_lands):
            yield
    finally:
        sb.restore_production()


@contextlib.contextmanager
def tampered_after_registration(sb: Sandbox, ref: CandidateRef) -> Iterator[None]:
    """One byte of the stored weights flipped after registration."""
    sb.tamper(ref)
    yield


@contextlib.contextmanager
def static_calibration_collapse(sb: Sandbox, ref: CandidateRef) -> Iterator[None]:
    """The policy pins static INT8, and the calibration split is a handful of one-word texts."""
    with sb.policy({"quantization": {"variant": "static"}}), sb.calibration(COLLAPSING_CALIBRATION):
        yield


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prometheus_unreachable(sb: Sandbox) -> Outcome:
    """One slo_sensor tick with Prometheus on a closed port: it must skip, launch nothing and keep its cursor."""
    from modelcd_assets.defs.sensors.slo_sensor import slo_sensor
    from modelcd_assets.resources.policy import PolicyResource
    from modelcd_assets.resources.prometheus import PrometheusResource
    from modelcd_assets.resources.registry import MlflowRegistryResource

    resources = {
        "registry": MlflowRegistryResource(tracking_uri=sb.env["MLFLOW_TRACKING_URI"], artifact_location=sb.env["MODELCD_MLFLOW_ARTIFACTS"]),
        "policy": PolicyResource(policy_dir=sb.env["MODELCD_POLICY_DIR"]),
        "prometheus": PrometheusResource(url=f"http://127.0.0.1:{_closed_port()}"),
    }
    # A streak already under way: an unreachable Prometheus must neither extend it nor reset it.
    cursor = json.dumps({sb.name: {"version": sb.production.version, "failures": [{"outcome": "fail"}], "rollbacks": 0}}, sort_keys=True)
    result = slo_sensor(dg.build_sensor_context(cursor=cursor, instance=sb.instance, resources=resources))
    if result.run_requests:
        return Outcome(LAUNCHED, detail=", ".join(r.run_key or "" for r in result.run_requests))
    if result.cursor != cursor:
        return Outcome(ERROR, detail=f"the tick changed the cursor to {result.cursor}")
    return Outcome(SKIPPED, detail=result.skip_reason.skip_message if result.skip_reason else "")
