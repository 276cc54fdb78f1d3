"""The OpenAI API's routes, each one line into lm/handler.CompletionHandler (chat and text completions, whole or
streamed as server-sent events, and the models it serves), and a causal LM's server: those routes with health,
readiness and metrics; its admin API is app.state.admin_app, as the classifier's.

Every bound is checked before a token is generated (serving/rejections.py); a request refused is counted by reason in
modelcd_requests_rejected_total, never in a version's series, which trigger_sensor judges.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from modelcd_assets.serving.base_app import base_app
from modelcd_assets.serving.lm.chaos import LmFaultRequest
from modelcd_assets.serving.lm.generation import Generations
from modelcd_assets.serving.lm.handler import CompletionHandler
from modelcd_assets.serving.lm.openai_api import ApiError, error_body
from modelcd_assets.serving.lm.pool import LmPool
from modelcd_assets.serving.metrics import LiveDriftCollector, LmServerMetrics
from modelcd_assets.serving.rejections import GENERATION_REASONS, REJECT_REASONS, Rejected
from modelcd_assets.serving.server import ServerInputs

log = logging.getLogger("modelcd.serve")
router = APIRouter()
faults_router = APIRouter()  # on the admin app, and only with --chaos


def handler(request: Request) -> CompletionHandler:
    return request.app.state.completions


@router.get("/v1/models")
async def models(request: Request):
    """NAME while production is served, and NAME:VERSION for each version loaded now (each verified when it was loaded)."""
    return handler(request).models()


@router.get("/v1/models/{model_id}")
async def model(model_id: str, request: Request):
    """One model by its id (NAME, or NAME:VERSION of a version loaded now), as OpenAI's models.retrieve reads it."""
    try:
        return handler(request).model(model_id)
    except Rejected as r:
        return ApiError.of(r).response()


async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
    """An unknown route (404) or a method a route does not take (405), in the OpenAI error body, as every other error."""
    if e.status_code == 404:
        message = (
            f"Invalid URL ({request.method} {request.url.path}): this server answers POST /v1/chat/completions, POST "
            "/v1/completions, GET /v1/models and GET /v1/models/{model}"
        )
    elif e.status_code == 405:
        allowed = (e.headers or {}).get("allow", "another method")
        message = f"{request.method} is not allowed on {request.url.path}; use {allowed}"
    else:
        message = str(e.detail)
    return JSONResponse(error_body(message, type="invalid_request_error"), status_code=e.status_code, headers=e.headers)


async def server_error(request: Request, e: Exception) -> JSONResponse:
    """An error no handler answered, in the OpenAI error body (500), as every other error. Starlette raises it again once
    this answer is sent, and the ASGI server logs it with its traceback."""
    return JSONResponse(error_body(f"the server failed to answer: {type(e).__name__}: {e}", type="server_error"), status_code=500)


@faults_router.post("/v1/admin/faults")
async def inject(body: LmFaultRequest, request: Request):
    return request.app.state.completions.inject(body)


@router.post("/v1/chat/completions")
async def chat_completions(request: Request):
    return await handler(request).create(request, chat=True)


@router.post("/v1/completions")
async def completions(request: Request):
    return await handler(request).create(request, chat=False)


def lm_server(inputs: ServerInputs) -> FastAPI:
    """A causal LM's server (lib/tasks/names.TaskDeclaration.server): one session per base build, its intra-op threads over all
    cores, since a decode step is one small matmul per layer."""
    if inputs.chaos:
        log.warning("--chaos: POST /v1/admin/faults can make any loaded version slow, failing or unable to stop before max_tokens")
    policy = inputs.policy
    pool = LmPool(inputs.model, inputs.registry, inputs.home, policy.serving, policy.safety.limits(), threads=None)
    return create_lm_app(
        pool,
        admin_token=inputs.admin_token,
        poll_seconds=policy.serving.poll_seconds,
        node_usd_per_hour=policy.cost.node_usd_per_hour,
        chaos=inputs.chaos,
    )


def create_lm_app(pool: LmPool, *, admin_token: str | None, poll_seconds: float, node_usd_per_hour: float, chaos: bool = False) -> FastAPI:
    metrics = LmServerMetrics(node_usd_per_hour, live_drift=LiveDriftCollector(pool.state_root, pool.model))
    policy = pool.policy
    generations = Generations(pool.model, policy, metrics)
    base = base_app(
        pool,
        metrics,
        (*REJECT_REASONS, *GENERATION_REASONS),
        admin_token=admin_token,
        poll_seconds=poll_seconds,
        closers=(generations.close,),
        description=f"Serves {pool.model}, a causal LM, through the OpenAI API, following its production alias.",
    )
    for a in (base.app, base.admin):
        a.state.generations = generations
    base.app.state.completions = base.admin.state.completions = CompletionHandler(
        pool, metrics, generations, base.swapper, base.traffic, base.sampler, base.rollout, base.shadow
    )
    base.app.include_router(router)
    base.app.add_exception_handler(StarletteHTTPException, http_error)
    base.app.add_exception_handler(Exception, server_error)
    if chaos:  # without it the route does not exist: a production server cannot be made to misbehave on purpose
        base.admin.include_router(faults_router, dependencies=[Depends(base.require_admin)])
    return base.app
