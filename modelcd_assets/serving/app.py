"""The ASGI app: classification, health, readiness, metrics, and the bearer-token admin API."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import random
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass

import numpy as np
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ConfigDict, Field

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.traffic_log import TrafficLog
from modelcd_assets.serving import ARTIFACT_HEADER, HASH_HEADER, VERSION_HEADER
from modelcd_assets.serving.batcher import MicroBatcher
from modelcd_assets.serving.engine import Served
from modelcd_assets.serving.follower import AliasFollower
from modelcd_assets.serving.metrics import LiveDriftCollector, ServerMetrics
from modelcd_assets.serving.pool import LoadReport, ServingPool, UnknownVersion

MAX_TEXTS = 64
log = logging.getLogger("modelcd.serve")


class ClassifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    texts: list[str] = Field(min_length=1, max_length=MAX_TEXTS, description="Texts to classify, all served by one version.")
    adapter: str | None = Field(None, description="Registry version of a loaded adapter; default: the version the server follows.")


class LoadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str = Field(pattern=r"^[0-9]+$", description="Registry version to load.")
    activate: bool = Field(True, description="Make it the default version once it has passed its probe.")


class FaultRequest(BaseModel):
    """Chaos testing: make a version slow, failing or NaN-producing, as a real regression would."""

    model_config = ConfigDict(extra="forbid")
    version: str = Field(pattern=r"^[0-9]+$")
    latency_ms: float = Field(0.0, ge=0, le=60_000)
    error_ratio: float = Field(0.0, ge=0, le=1)
    nan_ratio: float = Field(0.0, ge=0, le=1)


def _background_priority() -> None:
    """Run the loader thread at a lower CPU priority than requests (Linux: per-thread nice value)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):  # not Linux, or not permitted: loads just compete as equals
        pass


@dataclass
class Swapper:
    """Load-then-switch, shared by the alias follower and the admin API, with metrics."""

    pool: ServingPool
    metrics: ServerMetrics
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

    def switch(self, version: str) -> Served:
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


def create_app(pool: ServingPool, *, admin_token: str | None, poll_seconds: float, gate_problems: Callable[[str], list[str]] | None,
               chaos: bool = False, workers: int = 2) -> FastAPI:
    """The server for one registered model; it follows that model's production alias.

    gate_problems(version) says why a version has not passed its gates (empty when it has); the admin API loads and
    activates only versions it clears, and None turns the check off. chaos registers the fault-injection endpoint.
    A share serving.sample_ratio of the requests answered 200 have their texts written to the model's traffic log
    (lib/traffic_log.py), off the request path, for live drift; /metrics exports the live drift verdict judged on it.
    """
    metrics = ServerMetrics(live_drift=LiveDriftCollector(pool.state_root, pool.model))
    traffic = TrafficLog(pool.state_root, pool.model, pool.policy.sample_ratio, pool.policy.sample_max)
    sampler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="traffic-log")
    sampling_failed = threading.Event()  # warn once, not once per sampled request
    inference = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="inference")
    swapper = Swapper(pool, metrics, ThreadPoolExecutor(max_workers=1, thread_name_prefix="loader", initializer=_background_priority))
    follower = AliasFollower(pool.registry, pool.model, swapper)
    faults: dict[str, FaultRequest] = {}
    # One batcher per loaded version, gone with it: a batch never mixes versions.
    batchers: weakref.WeakKeyDictionary[Served, MicroBatcher] = weakref.WeakKeyDictionary()

    def sample(version: str, texts: list[str]) -> None:
        """Runs on the sampler thread: a sample that cannot be written costs the sample, never the request."""
        try:
            traffic.append(version, texts)
        except OSError as e:
            if not sampling_failed.is_set():
                sampling_failed.set()
                log.warning("sampled traffic cannot be written to %s (%s); requests are served as before, but live drift cannot be judged "
                            "until it can: check the folder's space and permissions, or set serving.sample_ratio to 0", traffic.folder, e)
        except Exception:  # a bug, not the disk: said once, loudly, and still never the request's problem
            if not sampling_failed.is_set():
                sampling_failed.set()
                log.exception("sampling traffic into %s failed", traffic.folder)

    def batcher(served: Served) -> MicroBatcher:
        b = batchers.get(served)
        if b is None:
            b = batchers[served] = MicroBatcher(served.logits, inference, pool.policy.max_batch, pool.policy.max_wait_ms, parallel=workers)
        return b

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        task = asyncio.create_task(follower.run(poll_seconds))
        try:
            yield
        finally:
            task.cancel()
            if hasattr(gate_problems, "close"):  # the gate-verdict helper process
                gate_problems.close()
            inference.shutdown(wait=False, cancel_futures=True)
            sampler.shutdown(wait=True)  # samples already taken are written (each is one small append), then the log closed
            traffic.close()
            swapper.executor.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="modelcd serve", description=f"Serves {pool.model}, following its production alias.", lifespan=lifespan)
    app.state.pool, app.state.follower, app.state.metrics, app.state.traffic = pool, follower, metrics, traffic

    def require_admin(request: Request) -> None:
        if not admin_token:
            raise HTTPException(401, "the admin API is disabled: start the server with MODELCD_ADMIN_TOKEN set", headers={"WWW-Authenticate": "Bearer"})
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), admin_token.encode()):
            raise HTTPException(401, "missing or wrong bearer token for the admin API", headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(UnknownVersion)
    async def _unknown(request: Request, exc: UnknownVersion):
        return JSONResponse({"error": str(exc)}, status_code=404 if pool.active is not None else 503)

    @app.get("/healthz")
    async def healthz():
        return {"status": "live"}

    @app.get("/readyz")
    async def readyz():
        served = pool.active
        if served is None:
            return JSONResponse({"status": "not ready", "reason": follower.waiting_reason()}, status_code=503)
        return {"status": "ready", "model": served.model, "version": served.version, "adapter_sha256": served.content_hash,
                "artifact_sha256": served.artifact_sha256, "variant": served.variant}

    @app.get("/metrics")
    async def metrics_endpoint():
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/classify")
    async def classify(body: ClassifyRequest):
        served = pool.resolve(body.adapter)  # the one snapshot this request is served by
        labels = (served.model, served.version, served.adapter_label)
        start = time.perf_counter()
        status, payload = 200, None
        try:
            fault = faults.get(served.version)
            if fault is not None and fault.latency_ms:
                await asyncio.sleep(fault.latency_ms / 1000)
            if fault is not None and random.random() < fault.error_ratio:
                return finish(served, labels, start, 500, {"error": "injected fault (chaos testing through /v1/admin/faults)"})
            out = await batcher(served).submit(body.texts)
            if fault is not None and random.random() < fault.nan_ratio:
                out = np.full_like(out, np.nan)
            bad = int((~np.isfinite(out)).any(axis=1).sum())
            if bad:
                metrics.nan_outputs.labels(*labels).inc()
                status, payload = 500, {"error": f"the model produced non-finite outputs for {bad} of {len(body.texts)} texts"}
            else:
                names = served.engine.labels
                payload = {"model": served.model, "version": served.version, "adapter_sha256": served.content_hash,
                           "artifact_sha256": served.artifact_sha256, "labels": names,
                           "predictions": [{"label": names[int(row.argmax())], "logits": [float(x) for x in row]} for row in out]}
                metrics.texts.labels(*labels).inc(len(body.texts))
        except Exception as e:  # a failed request is counted and answered, never dropped
            log.exception("classify failed on %s version %s", served.model, served.version)
            status, payload = 500, {"error": f"classification failed: {e}"}
        if status == 200 and traffic.chosen():
            with contextlib.suppress(RuntimeError):  # the sampler is shut down: the server is stopping
                sampler.submit(sample, served.version, body.texts)
        return finish(served, labels, start, status, payload)

    def finish(served: Served, labels: tuple, start: float, status: int, payload: dict) -> JSONResponse:
        metrics.requests.labels(*labels).inc()
        if status >= 500:
            metrics.errors.labels(*labels).inc()
        metrics.latency.labels(*labels).observe(time.perf_counter() - start)
        return JSONResponse(payload, status_code=status, headers={HASH_HEADER: served.content_hash, VERSION_HEADER: served.version,
                                                                  ARTIFACT_HEADER: served.artifact_sha256})

    async def ungated(version: str) -> JSONResponse | None:
        """The 409 refusal for a version that has not passed its gates; None when it has, or the check is off."""
        if gate_problems is None:
            return None
        problems = await asyncio.to_thread(gate_problems, version)
        if not problems:
            return None
        metrics.swaps.labels(pool.model, "refused").inc()
        active = pool.active
        return JSONResponse({"error": f"version {version} of {pool.model} has not passed its gates: {'; '.join(problems)}",
                             "gates": problems, "serving": active.version if active else None}, status_code=409)

    @app.get("/v1/admin/adapters", dependencies=[Depends(require_admin)])
    async def list_loaded():
        active = pool.active
        return {"model": pool.model, "default": active.version if active else None,
                "loaded": [{"version": s.version, "adapter_sha256": s.content_hash, "artifact_sha256": s.artifact_sha256, "variant": s.variant,
                            "last_load": pool.reports[s.version].as_dict() if s.version in pool.reports else None} for s in pool.loaded()]}

    @app.post("/v1/admin/adapters", dependencies=[Depends(require_admin)])
    async def load(body: LoadRequest):
        if (refusal := await ungated(body.version)) is not None:
            return refusal
        try:
            report = await swapper.swap_async(body.version, body.activate)
        except ModelcdError as e:
            active = pool.active
            return JSONResponse({"error": str(e), "serving": active.version if active else None}, status_code=422)
        return {"loaded": report.as_dict(), "serving": pool.active.version if pool.active else None}

    @app.post("/v1/admin/adapters/{version}/activate", dependencies=[Depends(require_admin)])
    async def activate(version: str):
        if (refusal := await ungated(version)) is not None:
            return refusal
        served = swapper.switch(version)
        return {"serving": served.version, "adapter_sha256": served.content_hash}

    @app.delete("/v1/admin/adapters/{version}", dependencies=[Depends(require_admin)])
    async def unload(version: str):
        try:
            pool.unload(version)
        except UnknownVersion:
            raise
        except ModelcdError as e:
            return JSONResponse({"error": str(e)}, status_code=409)
        return {"unloaded": version}

    async def inject(body: FaultRequest):
        if body.latency_ms or body.error_ratio or body.nan_ratio:
            faults[body.version] = body
        else:
            faults.pop(body.version, None)
        return {"faults": {v: f.model_dump() for v, f in faults.items()}}

    if chaos:  # without it the route does not exist: a production server cannot be made to misbehave on purpose
        app.post("/v1/admin/faults", dependencies=[Depends(require_admin)])(inject)

    return app

