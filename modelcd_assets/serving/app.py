"""The ASGI apps: the public one (classification, health, readiness, metrics) and the bearer-token admin API, served on
a port of its own."""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import queue
import random
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass

import numpy as np
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ConfigDict, Field

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.operations.traffic_log import TrafficLog, record_bytes_bound
from modelcd_assets.lib.release.servable import NotServable
from modelcd_assets.serving import ARTIFACT_HEADER, HASH_HEADER, VERSION_HEADER
from modelcd_assets.serving.batcher import MicroBatcher
from modelcd_assets.serving.engine import Served
from modelcd_assets.serving.follower import AliasFollower
from modelcd_assets.serving.limits import NOT_READY, REJECT_REASONS, UNKNOWN_VERSION, ClassifyRequest, Rejected, read_classify
from modelcd_assets.serving.metrics import LiveDriftCollector, ServerMetrics
from modelcd_assets.serving.pool import LoadReport, ServingPool, UnknownVersion

SAMPLE_QUEUE = 64  # sampled requests waiting for the traffic log's writer; each at most serving.max_body_bytes
log = logging.getLogger("modelcd.serve")


CLASSIFY_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": ClassifyRequest.model_json_schema()}}}}


class Sampler:
    """The traffic log's writer thread behind a bounded queue: a sample that finds the queue full is dropped and counted.

    A sample that cannot be written costs the sample, never the request; the first failure is logged.
    """

    def __init__(self, traffic: TrafficLog, dropped, size: int = SAMPLE_QUEUE):
        self.traffic, self.dropped = traffic, dropped
        self._queue: queue.Queue[tuple[str, list[str]] | None] = queue.Queue(maxsize=size)
        self._closed, self._failed = False, False
        self._thread = threading.Thread(target=self._run, name="traffic-log", daemon=True)
        self._thread.start()

    def submit(self, version: str, texts: list[str]) -> None:
        if self._closed:  # the server is stopping
            return
        try:
            self._queue.put_nowait((version, texts))
        except queue.Full:
            self.dropped.inc(len(texts))

    def close(self) -> None:
        """Write the samples already taken (each one small append), then stop."""
        self._closed = True
        self._queue.put(None)
        self._thread.join()
        self.traffic.close()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            self._write(*item)

    def _write(self, version: str, texts: list[str]) -> None:
        try:
            if too_long := self.traffic.append(version, texts):
                self.dropped.inc(too_long)
        except OSError as e:
            if not self._failed:
                self._failed = True
                log.warning("sampled traffic cannot be written to %s (%s); requests are served as before, but live drift cannot be judged "
                            "until it can: check the folder's space and permissions, or set serving.sample_ratio to 0", self.traffic.folder, e)
        except Exception:  # a bug, not the disk: said once, loudly, and still never the request's problem
            if not self._failed:
                self._failed = True
                log.exception("sampling traffic into %s failed", self.traffic.folder)


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


def create_app(pool: ServingPool, *, admin_token: str | None, poll_seconds: float, chaos: bool = False, workers: int = 2) -> FastAPI:
    """The public server for one registered model, following that model's production alias; its admin API is app.state.admin_app.

    The two apps share one pool, so `modelcd serve` runs them in one process, the admin app on a port of its own (the
    public app has no /v1/admin routes). Every load, by the alias follower or the admin API, goes through the pool, which
    takes a version only with a valid verdict over its bytes (lib/release/servable.py); the admin API answers 409 for a version
    without one. chaos registers the fault-injection endpoint. A classify request beyond serving.max_body_bytes, max_texts or max_text_chars is refused
    before it is parsed or tokenized, and counted in modelcd_requests_rejected_total, never in a version's requests or
    latency. A share serving.sample_ratio of the requests answered 200 have their texts written to the model's traffic
    log (lib/operations/traffic_log.py), off the request path, for live drift; /metrics exports the live drift verdict judged on it.
    """
    metrics = ServerMetrics(live_drift=LiveDriftCollector(pool.state_root, pool.model))
    for reason in REJECT_REASONS:
        metrics.rejected.labels(pool.model, reason)  # zeros from the start
    policy = pool.policy
    traffic = TrafficLog(pool.state_root, pool.model, policy.sample_ratio, policy.sample_max, max_bytes=policy.sample_max_bytes,
                         max_record_bytes=record_bytes_bound(policy.max_text_chars))
    sampler = Sampler(traffic, metrics.samples_dropped.labels(pool.model))
    inference = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="inference")
    swapper = Swapper(pool, metrics, ThreadPoolExecutor(max_workers=1, thread_name_prefix="loader", initializer=_background_priority))
    follower = AliasFollower(pool.registry, pool.model, swapper, on_refused=lambda version, why: metrics.alias_refused.labels(pool.model, version).set(1))
    faults: dict[str, FaultRequest] = {}
    # One batcher per loaded version, gone with it: a batch never mixes versions.
    batchers: weakref.WeakKeyDictionary[Served, MicroBatcher] = weakref.WeakKeyDictionary()

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
            inference.shutdown(wait=False, cancel_futures=True)
            sampler.close()
            swapper.executor.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="modelcd serve", description=f"Serves {pool.model}, following its production alias.", lifespan=lifespan)
    admin = FastAPI(title="modelcd serve: admin API", description=f"Loads, switches and unloads versions of {pool.model}; bearer token.")
    for a in (app, admin):
        a.state.pool, a.state.follower, a.state.metrics, a.state.traffic = pool, follower, metrics, traffic
    app.state.admin_app = admin

    def require_admin(request: Request) -> None:
        if not admin_token:
            raise HTTPException(401, "the admin API is disabled: start the server with MODELCD_ADMIN_TOKEN set", headers={"WWW-Authenticate": "Bearer"})
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), admin_token.encode()):
            raise HTTPException(401, "missing or wrong bearer token for the admin API", headers={"WWW-Authenticate": "Bearer"})

    @admin.exception_handler(UnknownVersion)
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

    def rejected(r: Rejected) -> JSONResponse:
        metrics.rejected.labels(pool.model, r.reason).inc()
        return r.response()

    @app.post("/v1/classify", openapi_extra=CLASSIFY_BODY)
    async def classify(request: Request):
        try:
            body = await read_classify(request, policy)
        except Rejected as r:
            return rejected(r)
        try:
            served = pool.resolve(body.adapter)  # the one snapshot this request is served by
        except UnknownVersion:
            # Only the version asked for is named: which versions are loaded is the admin API's to say.
            if pool.active is None:
                return rejected(Rejected(503, NOT_READY, f"no version of {pool.model} is being served yet; the server is not ready"))
            return rejected(Rejected(404, UNKNOWN_VERSION, f"version {body.adapter} of {pool.model} is not served here"))
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
            sampler.submit(served.version, body.texts)
        return finish(served, labels, start, status, payload)

    def finish(served: Served, labels: tuple, start: float, status: int, payload: dict) -> JSONResponse:
        metrics.requests.labels(*labels).inc()
        if status >= 500:
            metrics.errors.labels(*labels).inc()
        metrics.latency.labels(*labels).observe(time.perf_counter() - start)
        return JSONResponse(payload, status_code=status, headers={HASH_HEADER: served.content_hash, VERSION_HEADER: served.version,
                                                                  ARTIFACT_HEADER: served.artifact_sha256})

    @admin.get("/v1/admin/adapters", dependencies=[Depends(require_admin)])
    async def list_loaded():
        active = pool.active
        return {"model": pool.model, "default": active.version if active else None,
                "loaded": [{"version": s.version, "adapter_sha256": s.content_hash, "artifact_sha256": s.artifact_sha256, "variant": s.variant,
                            "last_load": pool.reports[s.version].as_dict() if s.version in pool.reports else None} for s in pool.loaded()]}

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

    async def inject(body: FaultRequest):
        if body.latency_ms or body.error_ratio or body.nan_ratio:
            faults[body.version] = body
        else:
            faults.pop(body.version, None)
        return {"faults": {v: f.model_dump() for v, f in faults.items()}}

    if chaos:  # without it the route does not exist: a production server cannot be made to misbehave on purpose
        admin.post("/v1/admin/faults", dependencies=[Depends(require_admin)])(inject)

    return app

