"""The admin API both servers share (bearer token, a port of its own): list, load, switch and unload versions; and the
Swapper the alias follower and the admin API load through."""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.release.servable import NotServable
from modelcd_assets.serving.metrics import Metrics
from modelcd_assets.serving.versions import LoadReport, UnknownVersion, VersionPool

log = logging.getLogger("modelcd.serve")


class LoadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str = Field(pattern=r"^[0-9]+$", description="Registry version to load.")
    activate: bool = Field(True, description="Make it the default version once it has passed its probe.")


def _background_priority() -> None:
    """Run the loader thread at a lower CPU priority than requests (Linux: per-thread nice value)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):  # not Linux, or not permitted: loads just compete as equals
        pass


@dataclass
class Swapper:
    """Load-then-switch, shared by the alias follower and the admin API, with metrics."""

    pool: VersionPool
    metrics: Metrics
    executor: ThreadPoolExecutor

    def swap(self, version: str, activate: bool = True) -> LoadReport:
        try:
            report = self.pool.load(version)
        except Exception:
            self.metrics.swaps.labels(self.pool.model, "refused").inc()
            raise
        if activate:
            self.switch(version)
        self.metrics.swaps.labels(self.pool.model, "switched" if activate else "loaded").inc()
        self.metrics.swap_seconds.labels(self.pool.model, report.variant).observe(report.seconds)
        return report

    def switch(self, version: str):
        previous = self.pool.active
        served = self.pool.activate(version)
        if previous is not None:
            self.metrics.serving.labels(previous.model, previous.version, previous.adapter_label).set(0)
        labels = (served.model, served.version, served.adapter_label)
        self.metrics.serving.labels(*labels).set(1)
        for counter in (self.metrics.requests, self.metrics.errors, self.metrics.nan_outputs):
            counter.labels(*labels)  # export zeros from the start, so "no errors" is a series at 0, not missing
        log.info("now serving %s version %s (adapter %s)", served.model, served.version, served.adapter_label)
        return served

    async def swap_async(self, version: str, activate: bool = True) -> LoadReport:
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.swap, version, activate)


def loader_executor() -> ThreadPoolExecutor:
    """The one thread loads run on, below requests' priority."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="loader", initializer=_background_priority)


def admin_app(pool, swapper: Swapper, admin_token: str | None) -> tuple[FastAPI, object]:
    """The admin app over pool (any task's VersionPool), and the dependency that checks its bearer token."""
    admin = FastAPI(title="modelcd serve: admin API", description=f"Loads, switches and unloads versions of {pool.model}; bearer token.")

    def require_admin(request: Request) -> None:
        if not admin_token:
            raise HTTPException(
                401, "the admin API is disabled: start the server with MODELCD_ADMIN_TOKEN set", headers={"WWW-Authenticate": "Bearer"}
            )
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), admin_token.encode()):
            raise HTTPException(401, "missing or wrong bearer token for the admin API", headers={"WWW-Authenticate": "Bearer"})

    @admin.exception_handler(UnknownVersion)
    async def _unknown(request: Request, exc: UnknownVersion):
        return JSONResponse({"error": str(exc)}, status_code=404 if pool.active is not None else 503)

    @admin.get("/v1/admin/adapters", dependencies=[Depends(require_admin)])
    async def list_loaded():
        active = pool.active
        return {
            "model": pool.model,
            "default": active.version if active else None,
            "loaded": [
                {
                    "version": s.version,
                    "adapter_sha256": s.content_hash,
                    "artifact_sha256": s.artifact_sha256,
                    "variant": s.variant,
                    "last_load": pool.reports[s.version].as_dict() if s.version in pool.reports else None,
                }
                for s in pool.loaded()
            ],
        }

    @admin.post("/v1/admin/adapters", dependencies=[Depends(require_admin)])
    async def load(body: LoadRequest):
        try:
            report = await swapper.swap_async(body.version, body.activate)
        except NotServable as e:  # no valid verdict over its bytes: not a load that failed, a version that may not be served
            active = pool.active
            return JSONResponse({"error": str(e), "serving": active.version if active else None}, status_code=409)
        except ModelcdError as e:
            active = pool.active
            return JSONResponse({"error": str(e), "serving": active.version if active else None}, status_code=422)
        return {"loaded": report.as_dict(), "serving": pool.active.version if pool.active else None}

    @admin.post("/v1/admin/adapters/{version}/activate", dependencies=[Depends(require_admin)])
    async def activate(version: str):
        served = swapper.switch(version)
        return {"serving": served.version, "adapter_sha256": served.content_hash}

    @admin.delete("/v1/admin/adapters/{version}", dependencies=[Depends(require_admin)])
    async def unload(version: str):
        try:
            pool.unload(version)
        except UnknownVersion:
            raise
        except ModelcdError as e:
            return JSONResponse({"error": str(e)}, status_code=409)
        return {"unloaded": version}

    return admin, require_admin
