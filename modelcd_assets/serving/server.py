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
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.policy import Policy, policy_for
from modelcd_assets.lib.release.registry import Registry
from modelcd_assets.lib.tasks.names import DEFAULT_TASK, declaration_of, load_declared

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
    task = task_of_model(registry, model)
    build = load_declared(declaration_of(task).server, f"task {task!r}'s server")
    if build is None:
        raise ModelcdError(
            f"{model} is a {task} model, and the {task} task declares no server (TaskDeclaration.server); nothing can serve it"
        )
    return build(ServerInputs(model, registry, Path(env["MODELCD_HOME"]), policy, env.get(ADMIN_TOKEN_ENV) or None, workers, chaos))


@dataclass(frozen=True)
class ServerInputs:
    """What a task's server (lib/tasks/names.TaskDeclaration.server) is built from: the model, its registry, the state folder, the
    model's effective policy, the admin token (None: no admin API), the number of concurrent model calls, and --chaos."""

    model: str
    registry: Registry
    home: Path
    policy: Policy
    admin_token: str | None
    workers: int
    chaos: bool


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
