"""`modelcd serve`: the app for one registered model, configured from the environment, under uvicorn."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from fastapi import FastAPI

from modelcd_assets.lib.registry import Registry
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets.serving.app import create_app
from modelcd_assets.serving.pool import ServingPool

ADMIN_TOKEN_ENV = "MODELCD_ADMIN_TOKEN"


def app_from_env(model: str, workers: int = 2, environ: dict | None = None) -> FastAPI:
    """The server for model, with the state folder, registry, data and policy the rest of modelcd uses."""
    import torch

    env = os.environ if environ is None else environ
    # Each request runs on one core; concurrency comes from the inference threads, and a swap's probe
    # on the loader thread does not steal cores from requests in flight.
    torch.set_num_threads(1)
    policy = PolicyResource(policy_dir=env["MODELCD_POLICY_DIR"]).for_model(model)
    registry = Registry.from_env(env)
    registry.require_candidate_model(model)
    pool = ServingPool(model, registry, Path(env["MODELCD_HOME"]), Path(env["MODELCD_DATA"]), policy.serving, policy.safety.limits())
    return create_app(pool, admin_token=env.get(ADMIN_TOKEN_ENV) or None, poll_seconds=policy.serving.poll_seconds, workers=workers)


def serve(model: str, host: str, port: int, workers: int) -> int:
    import uvicorn

    import mlflow  # noqa: F401  (configures its own loggers on import; quieten them after)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    app = app_from_env(model, workers)
    if not os.environ.get(ADMIN_TOKEN_ENV):
        logging.getLogger("modelcd.serve").warning("%s is not set: the admin API answers 401 to every call", ADMIN_TOKEN_ENV)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    return 0
