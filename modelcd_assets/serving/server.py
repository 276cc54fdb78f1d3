"""`modelcd serve`: the app for one registered model, configured from the environment, under uvicorn."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import FastAPI

from modelcd_assets.lib.registry import CandidateRef, Registry
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets.serving.app import create_app
from modelcd_assets.serving.pool import ServingPool

if TYPE_CHECKING:  # Dagster is imported only when the gate check is on
    import dagster as dg

ADMIN_TOKEN_ENV = "MODELCD_ADMIN_TOKEN"
log = logging.getLogger("modelcd.serve")


def gate_reader(model: str, instance: dg.DagsterInstance | None = None) -> Callable[[str], list[str]]:
    """Why a version of model has not passed its gates, as promotion judges it; the asset graph is loaded once, here."""
    import dagster as dg

    from modelcd_assets.gate_results import code_location_graph, read_gates

    instance = instance if instance is not None else dg.DagsterInstance.get()  # the one at $DAGSTER_HOME
    graph = code_location_graph()
    return lambda version: read_gates(instance, CandidateRef(model, version).key, graph).problems


def app_from_env(model: str, workers: int = 2, environ: dict | None = None, *, allow_ungated: bool = False, chaos: bool = False,
                 instance: dg.DagsterInstance | None = None) -> FastAPI:
    """The server for model, with the state folder, registry, data, policy and Dagster instance the rest of modelcd uses."""
    import torch

    env = os.environ if environ is None else environ
    # Each request runs on one core; concurrency comes from the inference threads, and a swap's probe
    # on the loader thread does not steal cores from requests in flight.
    torch.set_num_threads(1)
    policy = PolicyResource(policy_dir=env["MODELCD_POLICY_DIR"]).for_model(model)
    registry = Registry.from_env(env)
    registry.require_candidate_model(model)
    pool = ServingPool(model, registry, Path(env["MODELCD_HOME"]), Path(env["MODELCD_DATA"]), policy.serving, policy.safety.limits())
    if allow_ungated:
        log.warning("--allow-ungated: the admin API loads and activates versions that have not passed their gates")
    if chaos:
        log.warning("--chaos: POST /v1/admin/faults can make any loaded version slow, failing or NaN-producing")
    return create_app(pool, admin_token=env.get(ADMIN_TOKEN_ENV) or None, poll_seconds=policy.serving.poll_seconds,
                      gate_problems=None if allow_ungated else gate_reader(model, instance), chaos=chaos, workers=workers)


def serve(model: str, host: str, port: int, workers: int, allow_ungated: bool = False, chaos: bool = False) -> int:
    import uvicorn

    import mlflow  # noqa: F401  (configures its own loggers on import; quieten them after)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    app = app_from_env(model, workers, allow_ungated=allow_ungated, chaos=chaos)
    if not os.environ.get(ADMIN_TOKEN_ENV):
        log.warning("%s is not set: the admin API answers 401 to every call", ADMIN_TOKEN_ENV)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    return 0
