"""The ASGI apps: the public one (classification, health, readiness, metrics) and the bearer-token admin API, served on
a port of its own."""

from __future__ import annotations

import asyncio
import logging
import random
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from modelcd_assets.serving import ARTIFACT_HEADER, HASH_HEADER, VERSION_HEADER
from modelcd_assets.serving.base_app import base_app
from modelcd_assets.serving.classifier.batcher import MicroBatcher
from modelcd_assets.serving.classifier.classify_api import CLASSIFY_BODY, FaultRequest, read_classify
from modelcd_assets.serving.classifier.engine import Served
from modelcd_assets.serving.classifier.pool import ServingPool
from modelcd_assets.serving.metrics import LiveDriftCollector, ServerMetrics
from modelcd_assets.serving.rejections import REJECT_REASONS, Rejected, not_ready, unknown_version
from modelcd_assets.serving.server import ServerInputs
from modelcd_assets.serving.versions import UnknownVersion

log = logging.getLogger("modelcd.serve")


def classifier_server(inputs: ServerInputs) -> FastAPI:
    """A classifier's server (lib/tasks/names.TaskDeclaration.server): one intra-op thread per model call, and concurrency from
    `workers` calls at once, so a swap's probe on the loader thread does not steal every core from requests in flight."""
    pool = ServingPool(inputs.model, inputs.registry, inputs.home, inputs.policy.serving, inputs.policy.safety.limits(), threads=1)
    if inputs.chaos:
        log.warning("--chaos: POST /v1/admin/faults can make any loaded version slow, failing or NaN-producing")
    return create_app(
        pool, admin_token=inputs.admin_token, poll_seconds=inputs.policy.serving.poll_seconds, chaos=inputs.chaos, workers=inputs.workers
    )


def create_app(pool: ServingPool, *, admin_token: str | None, poll_seconds: float, chaos: bool = False, workers: int = 2) -> FastAPI:
    """The public server for one registered model, following that model's production alias; its admin API is app.state.admin_app.

    The two apps share one pool, so `modelcd serve` runs them in one process, the admin app on a port of its own (the
    public app has no /v1/admin routes). Every load, by the alias follower or the admin API, goes through the pool, which
    takes a version only with a valid verdict over its bytes (lib/release/servable.py); the admin API answers 409 for a version
    without one. chaos registers the fault-injection endpoint. A classify request beyond serving.max_body_bytes, max_texts or
    max_text_chars is refused
    before it is parsed or tokenized, and counted in modelcd_requests_rejected_total, never in a version's requests or
    latency. A share serving.sample_ratio of the requests answered 200 have their texts written to the model's traffic
    log (lib/operations/traffic_log.py), off the request path, for live drift; /metrics exports the live drift verdict judged on it.
    """
    metrics = ServerMetrics(live_drift=LiveDriftCollector(pool.state_root, pool.model))
    policy = pool.policy
    inference = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="inference")
    sc = base_app(
        pool,
        metrics,
        REJECT_REASONS,
        admin_token=admin_token,
        poll_seconds=poll_seconds,
        description=f"Serves {pool.model}, following its production alias.",
        closers=(lambda: inference.shutdown(wait=False, cancel_futures=True),),
    )
    app, admin, require_admin, traffic, sampler = sc.app, sc.admin, sc.require_admin, sc.traffic, sc.sampler
    faults: dict[str, FaultRequest] = {}
    # One batcher per loaded version, gone with it: a batch never mixes versions.
    batchers: weakref.WeakKeyDictionary[Served, MicroBatcher] = weakref.WeakKeyDictionary()

    def batcher(served: Served) -> MicroBatcher:
        b = batchers.get(served)
        if b is None:
            b = batchers[served] = MicroBatcher(served.logits, inference, pool.policy.max_batch, pool.policy.max_wait_ms, parallel=workers)
        return b

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
            if pool.active is None:
                return rejected(not_ready(pool.model))
            return rejected(unknown_version(pool.model, body.adapter))
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
                payload = {
                    "model": served.model,
                    "version": served.version,
                    "adapter_sha256": served.content_hash,
                    "artifact_sha256": served.artifact_sha256,
                    "labels": names,
                    "predictions": [{"label": names[int(row.argmax())], "logits": [float(x) for x in row]} for row in out],
                }
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
        return JSONResponse(
            payload,
            status_code=status,
            headers={HASH_HEADER: served.content_hash, VERSION_HEADER: served.version, ARTIFACT_HEADER: served.artifact_sha256},
        )

    async def inject(body: FaultRequest):
        if body.latency_ms or body.error_ratio or body.nan_ratio:
            faults[body.version] = body
        else:
            faults.pop(body.version, None)
        return {"faults": {v: f.model_dump() for v, f in faults.items()}}

    if chaos:  # without it the route does not exist: a production server cannot be made to misbehave on purpose
        admin.post("/v1/admin/faults", dependencies=[Depends(require_admin)])(inject)

    return app
