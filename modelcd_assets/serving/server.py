"""`modelcd serve`: the app for one registered model, configured from the environment, under uvicorn.

The serving process imports neither torch nor Dagster: it runs ONNX Runtime on the gated artifact, reads
the policy file itself, and asks a `modelcd verdict --stdin` helper process (the one reader of gate results)
whether a version may be loaded through the admin API.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI

from modelcd_assets.lib.policy import load_policy, policy_file
from modelcd_assets.lib.registry import Registry
from modelcd_assets.serving.app import create_app
from modelcd_assets.serving.pool import ServingPool
from modelcd_assets.serving.verdicts import GateVerdicts

ADMIN_TOKEN_ENV = "MODELCD_ADMIN_TOKEN"
log = logging.getLogger("modelcd.serve")


def app_from_env(model: str, workers: int = 2, environ: dict | None = None, *, allow_ungated: bool = False, chaos: bool = False,
                 gate_problems: Callable[[str], list[str]] | None = None) -> FastAPI:
    """The server for model, with the state folder, registry, policy and Dagster instance the rest of modelcd uses.

    gate_problems replaces the `modelcd verdict` helper (tests read gate results in process).
    """
    env = dict(os.environ if environ is None else environ)
    policy = load_policy(policy_file(Path(env["MODELCD_POLICY_DIR"]), model))
    registry = Registry.from_env(env)
    registry.require_candidate_model(model)
    # One intra-op thread per model call; concurrency comes from `workers` calls at once, so a swap's probe
    # on the loader thread does not steal every core from requests in flight.
    pool = ServingPool(model, registry, Path(env["MODELCD_HOME"]), policy.serving, policy.safety.limits(), threads=1)
    if allow_ungated:
        log.warning("--allow-ungated: the admin API loads and activates versions that have not passed their gates")
    if chaos:
        log.warning("--chaos: POST /v1/admin/faults can make any loaded version slow, failing or NaN-producing")
    check = None if allow_ungated else gate_problems
    if check is None and not allow_ungated:
        check = GateVerdicts(model, env)
        check.start()
    return create_app(pool, admin_token=env.get(ADMIN_TOKEN_ENV) or None, poll_seconds=policy.serving.poll_seconds,
                      gate_problems=check, chaos=chaos, workers=workers)


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
