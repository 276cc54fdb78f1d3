"""What goes wrong around a candidate rather than in it: the registry, a concurrent promotion, Prometheus, the calibration data.

Each condition is injected in process, as the tests do, and holds only while one gated run (or one sensor tick, or one
`modelcd gate`) lasts.
"""

from __future__ import annotations

import contextlib
import json
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import dagster as dg

from modelcd_assets.faults.builders import identical
from modelcd_assets.faults.outcomes import ERROR, LAUNCHED, PROMOTED, RUN_FAILED, SKIPPED, Outcome
from modelcd_assets.faults.sandbox import Sandbox
from modelcd_assets.lib.release.registry import PRODUCTION, PROMOTION, CandidateRef

# One-word tickets: activation ranges calibrated on them clip real traffic (measured: 96.7% INT8/FP32 agreement on the tiny test model).
COLLAPSING_CALIBRATION = ["ok", "hi", "yes", "no"]


@contextlib.contextmanager
def _database_locked() -> Iterator[None]:
    """MLflow answers every get_registered_model with a database error, as a locked SQLite or a failing server does."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INTERNAL_ERROR

    def outage(self, name):
        raise MlflowException("(sqlite3.OperationalError) database is locked", error_code=INTERNAL_ERROR)

    with mock.patch.object(MlflowClient, "get_registered_model", outage):
        yield


def _judge_cli(sb: Sandbox, ref: CandidateRef, code: int, err: str) -> Outcome:
    """What `modelcd gate` did to ref, read from the registry once it answers again: promoted, or the exit code and modelcd's one-line
    error."""
    now = sb.registry.production(sb.name)
    if now != sb.production or PROMOTION in sb.registry.tags(ref):
        return Outcome(PROMOTED, detail=f"exit {code}; production is {now.uri if now else 'nothing'}")
    said = [line for line in err.splitlines() if line.startswith("modelcd: ")]
    return Outcome(RUN_FAILED, detail=f"exit {code}: {said[-1] if said else err.strip()[-300:]}")


def registry_outage(sb: Sandbox) -> Outcome:
    """`modelcd gate` while MLflow answers every get_registered_model with a database error (a locked SQLite): the run fails, exit 1."""
    ref = sb.register(identical(sb.prod, sb.work / "registry_outage"))
    with _database_locked():
        code, err = sb.cli(["gate", ref.name, ref.version])
    return _judge_cli(sb, ref, code, err)


def registry_unreachable(sb: Sandbox) -> Outcome:
    """`modelcd gate` with the registry on a closed port: no answer at all, and no run is launched."""
    ref = sb.register(identical(sb.prod, sb.work / "registry_unreachable"))
    code, err = sb.cli(
        ["gate", ref.name, ref.version],
        MLFLOW_TRACKING_URI=f"http://127.0.0.1:{_closed_port()}",
        MLFLOW_HTTP_REQUEST_MAX_RETRIES="0",
        MLFLOW_HTTP_REQUEST_TIMEOUT="5",
    )
    return _judge_cli(sb, ref, code, err)


@contextlib.contextmanager
def production_alias_deleted(sb: Sandbox, ref: CandidateRef) -> Iterator[None]:
    """The `production` alias deleted by hand from a model that had a production (a modelcd.promotion record on a version)."""
    sb.registry.client.delete_registered_model_alias(sb.name, PRODUCTION)
    try:
        yield
    finally:
        if sb.registry.production(sb.name) is None:
            sb.registry.client.set_registered_model_alias(sb.name, PRODUCTION, sb.production.version)


@contextlib.contextmanager
def production_moves(sb: Sandbox, ref: CandidateRef) -> Iterator[None]:
    """Another promotion lands between the candidate's last gate and its own promotion (the before_promotion failpoint)."""
    from modelcd_assets.defs.assets import production_model as step

    rival = sb.register(identical(sb.prod, sb.work / "rival"))

    def another_promotion_lands(name: str) -> None:
        if name == "before_promotion":
            sb.registry.move_production(rival, {"fault_sandbox": "a concurrent promotion"}, expected=sb.production, lock=sb.alias_lock)

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


def calibration_collapses(sb: Sandbox) -> tuple[bool, str]:
    """Whether static INT8 calibrated on COLLAPSING_CALIBRATION falls below the fidelity floor on production's own build, measured as
    quantized_model and int8_agrees_with_fp32 measure it (same quantizer, evaluation split, predictions and verdict); and what was measured.
    """
    import numpy as np

    from modelcd_assets.lib.inference.evaluate import predict
    from modelcd_assets.lib.inference.quantize import optimize_transformer, quantize_static_int8
    from modelcd_assets.lib.inference.tokens import encode
    from modelcd_assets.lib.judging.gates import FAIL, judge_fidelity
    from modelcd_assets.lib.judging.policy import policy_for
    from modelcd_assets.lib.release.candidate import CandidateRecord
    from modelcd_assets.lib.splits import read_split, split_path

    build = CandidateRecord.of(sb.home, sb.production).build
    floor = policy_for(Path(sb.env["MODELCD_POLICY_DIR"]), sb.name).int8_fidelity
    texts = [ex.text for ex in read_split(split_path(sb.data, "evaluation"))]
    with tempfile.TemporaryDirectory(dir=sb.work) as tmp:
        fused = build.optimized
        if not fused.is_file():  # production's build made only a variant that needed no fusion of its own
            fused = Path(tmp) / "optimized.onnx"
            optimize_transformer(build.onnx, fused, build.merged / "config.json")
        static = quantize_static_int8(fused, Path(tmp) / "static.onnx", encode(build.merged, COLLAPSING_CALIBRATION))
        feeds = encode(build.merged, texts)
        fp32 = np.load(build.predictions("fp32")) if build.predictions("fp32").is_file() else predict(build.onnx, feeds)
        verdict = judge_fidelity(predict(static, feeds), fp32, floor)
    return (
        verdict.status == FAIL,
        f"static INT8 calibrated on {len(COLLAPSING_CALIBRATION)} one-word texts, on production's build: {verdict.reason}",
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prometheus_unreachable(sb: Sandbox) -> Outcome:
    """One trigger_sensor tick with Prometheus on a closed port: it must skip, launch nothing and keep its cursor."""
    from modelcd_assets.defs.sensors.trigger_sensor import trigger_sensor
    from modelcd_assets.resources.policy import PolicyResource
    from modelcd_assets.resources.prometheus import PrometheusResource
    from modelcd_assets.resources.registry import MlflowRegistryResource
    from modelcd_assets.resources.state import LocalStateResource

    resources = {
        "registry": MlflowRegistryResource(
            tracking_uri=sb.env["MLFLOW_TRACKING_URI"], artifact_location=sb.env["MODELCD_MLFLOW_ARTIFACTS"]
        ),
        "policy": PolicyResource(policy_dir=sb.env["MODELCD_POLICY_DIR"]),
        "prometheus": PrometheusResource(url=f"http://127.0.0.1:{_closed_port()}"),
        "state": LocalStateResource(home=str(sb.home), data_dir=str(sb.data)),
    }
    # The SLO's failing streak already under way: an unreachable Prometheus must neither extend it nor reset it.
    streak = {"version": sb.production.version, "since": 1.0, "fired": False, "count": 1, "evaluations": [{"outcome": "fail"}]}
    cursor = json.dumps({sb.name: {"0:slo": streak}}, sort_keys=True)
    result = trigger_sensor(dg.build_sensor_context(cursor=cursor, instance=sb.instance, resources=resources))
    if result.run_requests:
        return Outcome(LAUNCHED, detail=", ".join(r.run_key or "" for r in result.run_requests))
    if result.cursor != cursor:
        return Outcome(ERROR, detail=f"the tick changed the cursor to {result.cursor}")
    return Outcome(SKIPPED, detail=result.skip_reason.skip_message if result.skip_reason else "")
