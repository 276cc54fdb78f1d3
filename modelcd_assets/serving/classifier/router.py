"""The classify API's routes, each one line into classifier/handler.ClassifyHandler, and the classifier's server: the
public app (classification, health, readiness, metrics) and the bearer-token admin API, served on a port of its own."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from modelcd_assets.serving.base_app import base_app
from modelcd_assets.serving.classifier import inference_protocol as oip
from modelcd_assets.serving.classifier.classify_api import CLASSIFY_BODY, FaultRequest
from modelcd_assets.serving.classifier.handler import ClassifyHandler
from modelcd_assets.serving.classifier.pool import ClassifierPool
from modelcd_assets.serving.metrics import LiveDriftCollector, ServerMetrics
from modelcd_assets.serving.rejections import REJECT_REASONS
from modelcd_assets.serving.server import ServerInputs

log = logging.getLogger("modelcd.serve")
router = APIRouter()
faults_router = APIRouter()  # on the admin app, and only with --chaos


def handler(request: Request) -> ClassifyHandler:
    return request.app.state.classify


@router.post("/v1/classify", openapi_extra=CLASSIFY_BODY)
async def classify(request: Request):
    return await handler(request).classify(request)


# The Open Inference Protocol (KServe V2 / Triton / Seldon MLServer), beside /v1/classify.


@router.get("/v2")
async def server_metadata(request: Request):
    return {"name": "modelcd", "version": modelcd_version(), "extensions": oip.EXTENSIONS}


@router.get("/v2/health/live")
async def v2_live():
    return {"live": True}


@router.get("/v2/health/ready")
async def v2_ready(request: Request):
    ready = request.app.state.pool.active is not None
    return JSONResponse({"ready": ready}, status_code=200 if ready else 503)


def _v2_model_route(path: str, method: str, answer) -> None:
    """A V2 model route, on the model (production) and on one of its versions: answer(handler, request, name, version)."""

    async def endpoint(name: str, request: Request):
        return await answer(handler(request), request, name, request.path_params.get("version"))

    for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        router.add_api_route(prefix + path, endpoint, methods=[method])


async def _metadata(h: ClassifyHandler, request: Request, name: str, version: str | None):
    return h.model_metadata(name, version)


async def _ready(h: ClassifyHandler, request: Request, name: str, version: str | None):
    return h.model_ready(name, version)


async def _infer(h: ClassifyHandler, request: Request, name: str, version: str | None):
    return await h.infer(request, name, version)


_v2_model_route("", "GET", _metadata)
_v2_model_route("/ready", "GET", _ready)
_v2_model_route("/infer", "POST", _infer)


def modelcd_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("modelcd")
    except PackageNotFoundError:
        return "unknown"


@faults_router.post("/v1/admin/faults")
async def inject(body: FaultRequest, request: Request):
    return handler(request).inject(body)


def classifier_server(inputs: ServerInputs) -> FastAPI:
    """A classifier's server (lib/tasks/names.TaskDeclaration.server): one intra-op thread per model call, and concurrency from
    `workers` calls at once, so a swap's probe on the loader thread does not steal every core from requests in flight."""
    pool = ClassifierPool(inputs.model, inputs.registry, inputs.home, inputs.policy.serving, inputs.policy.safety.limits(), threads=1)
    if inputs.chaos:
        log.warning("--chaos: POST /v1/admin/faults can make any loaded version slow, failing or NaN-producing")
    return create_app(
        pool,
        admin_token=inputs.admin_token,
        poll_seconds=inputs.policy.serving.poll_seconds,
        node_usd_per_hour=inputs.policy.cost.node_usd_per_hour,
        chaos=inputs.chaos,
        workers=inputs.workers,
    )


def create_app(
    pool: ClassifierPool, *, admin_token: str | None, poll_seconds: float, node_usd_per_hour: float, chaos: bool = False, workers: int = 2
) -> FastAPI:
    """The public server for one registered model, following that model's production alias; its admin API is app.state.admin_app.

    The two apps share one pool, so `modelcd serve` runs them in one process, the admin app on a port of its own (the
    public app has no /v1/admin routes). Every load, by the alias follower or the admin API, goes through the pool, which
    takes a version only with a valid verdict over its bytes (lib/release/servable.py); the admin API answers 409 for a version
    without one. chaos registers the fault-injection endpoint. A classify request beyond serving.max_body_bytes, max_texts or
    max_text_chars is refused before it is parsed or tokenized, and counted in modelcd_requests_rejected_total, never in a
    version's requests or latency. A share serving.sample_ratio of the requests answered 200 have their texts written to the model's traffic
    log (lib/operations/traffic_log.py), off the request path, for live drift; /metrics exports the live drift verdict judged on it.
    """
    metrics = ServerMetrics(node_usd_per_hour, live_drift=LiveDriftCollector(pool.state_root, pool.model))
    inference = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="inference")
    base = base_app(
        pool,
        metrics,
        REJECT_REASONS,
        admin_token=admin_token,
        poll_seconds=poll_seconds,
        description=f"Serves {pool.model}, following its production alias.",
        closers=(lambda: inference.shutdown(wait=False, cancel_futures=True),),
    )
    base.app.state.classify = base.admin.state.classify = ClassifyHandler(
        pool, metrics, base.traffic, base.sampler, inference, workers, base.rollout, base.shadow
    )
    base.app.include_router(router)
    if chaos:  # without it the route does not exist: a production server cannot be made to misbehave on purpose
        base.admin.include_router(faults_router, dependencies=[Depends(base.require_admin)])
    return base.app
