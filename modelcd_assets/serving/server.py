"""`modelcd serve`: the app for one registered model, configured from the environment, under uvicorn.

The serving process imports neither torch nor Dagster: it runs ONNX Runtime on the gated artifact, reads
the policy file itself, and loads a version (following the alias, or through the admin API) only with a valid
signed verdict over its bytes (lib/release/servable.py), so it needs no Dagster database. The admin API listens on a port of its own, on
loopback
unless told otherwise, and only when MODELCD_ADMIN_TOKEN is set; the public port has no admin routes.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from fastapi import FastAPI

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.policy import policy_for
from modelcd_assets.lib.release.registry import Registry
from modelcd_assets.lib.tasks.names import CAUSAL_LM, DEFAULT_TASK
from modelcd_assets.serving.app import create_app
from modelcd_assets.serving.pool import ServingPool

ADMIN_TOKEN_ENV = "MODELCD_ADMIN_TOKEN"
ADMIN_HOST, ADMIN_PORT = "127.0.0.1", 8081
log = logging.getLogger("modelcd.serve")


def app_from_env(model: str, workers: int = 2, environ: dict | None = None, *, chaos: bool = False) -> FastAPI:
    """The server for model, with the state folder, registry, policy and public key the rest of modelcd uses (no Dagster database:
    a version's signed attestation says whether it may be served)."""
    env = dict(os.environ if environ is None else environ)
    policy = policy_for(Path(env["MODELCD_POLICY_DIR"]), model)
    registry = Registry.from_env(env)
    registry.require_candidate_model(model)
    # One intra-op thread per model call; concurrency comes from `workers` calls at once, so a swap's probe
    # on the loader thread does not steal every core from requests in flight.
    if task_of_model(registry, model) == CAUSAL_LM:
        from modelcd_assets.serving.lm_app import create_lm_app
        from modelcd_assets.serving.lm_pool import LmPool

        if chaos:
            raise ModelcdError(
                f"--chaos injects faults into classify requests; {model} is a causal LM, served through the OpenAI API without it"
            )
        # One session per base build, its intra-op threads over all cores: a decode step is one small matmul per layer.
        lm_pool = LmPool(model, registry, Path(env["MODELCD_HOME"]), policy.serving, policy.safety.limits(), threads=None)
        return create_lm_app(
            lm_pool,
            admin_token=env.get(ADMIN_TOKEN_ENV) or None,
            poll_seconds=policy.serving.poll_seconds,
            node_usd_per_hour=policy.cost.node_usd_per_hour,
        )
    pool = ServingPool(model, registry, Path(env["MODELCD_HOME"]), policy.serving, policy.safety.limits(), threads=1)
    if chaos:
        log.warning("--chaos: POST /v1/admin/faults can make any loaded version slow, failing or NaN-producing")
    return create_app(
        pool, admin_token=env.get(ADMIN_TOKEN_ENV) or None, poll_seconds=policy.serving.poll_seconds, chaos=chaos, workers=workers
    )


def task_of_model(registry: Registry, model: str) -> str:
    """The task a registered model's versions record (its production's, else its newest version's): which server it gets."""
    ref = registry.production(model)
    if ref is None:
        versions = registry.versions(model)
        ref = max(versions, key=lambda r: int(r.version)) if versions else None
    return registry.task(ref) if ref is not None else DEFAULT_TASK


def serve(
    model: str, host: str, port: int, workers: int, chaos: bool = False, admin_host: str = ADMIN_HOST, admin_port: int = ADMIN_PORT
) -> int:
    """The public app on host:port and the admin app on admin_host:admin_port (0: none), in one process and event loop."""
    import mlflow  # noqa: F401  (configures its own loggers on import; quieten them after)
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    app = app_from_env(model, workers, chaos=chaos)
    configs = [uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)]
    if not os.environ.get(ADMIN_TOKEN_ENV):
        log.warning("%s is not set: no admin API (it would answer 401 to every call), so no admin port is opened", ADMIN_TOKEN_ENV)
    elif not admin_port:
        log.warning("--admin-port 0: no admin API")
    else:
        configs.append(
            uvicorn.Config(app.state.admin_app, host=admin_host, port=admin_port, lifespan="off", log_level="warning", access_log=False)
        )
        log.info("admin API on http://%s:%d/v1/admin/", admin_host, admin_port)
    servers = [uvicorn.Server(c) for c in configs]
    try:
        with asyncio.Runner(loop_factory=configs[0].get_loop_factory()) as runner:
            return runner.run(_serve_together(servers))
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it handled, once both servers have shut down
        return 0


async def _serve_together(servers: list) -> int:
    """Run uvicorn servers in one event loop until one of them stops (a signal, or a port it could not bind); then stop them all.

    Returns 1 when one of them could not start (uvicorn logged why), else 0.
    """

    async def run(server) -> int:
        try:
            await server.serve()
        except SystemExit as e:  # uvicorn's way to fail a start; the other server must still shut down cleanly
            return 1 if e.code else 0
        return 0

    tasks = [asyncio.create_task(run(s)) for s in servers]
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for s in servers:
        s.should_exit = True
    return max(await asyncio.gather(*tasks))
