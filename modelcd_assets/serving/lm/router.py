"""The OpenAI API's routes, each one line into lm/handler.CompletionHandler (chat and text completions, whole or
streamed as server-sent events, and the models it serves), and a causal LM's server: those routes with health,
readiness and metrics; its admin API is app.state.admin_app, as the classifier's.

Every bound is checked before a token is generated (serving/rejections.py); a request refused is counted by reason in
modelcd_requests_rejected_total, never in a version's series, which trigger_sensor judges.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.serving.base_app import base_app
from modelcd_assets.serving.lm.generation import Generations
from modelcd_assets.serving.lm.handler import CompletionHandler
from modelcd_assets.serving.lm.pool import LmPool
from modelcd_assets.serving.metrics import LiveDriftCollector, LmServerMetrics
from modelcd_assets.serving.rejections import GENERATION_REASONS, REJECT_REASONS
from modelcd_assets.serving.server import ServerInputs

router = APIRouter()


def handler(request: Request) -> CompletionHandler:
    return request.app.state.completions


@router.get("/v1/models")
async def models(request: Request):
    """NAME while production is served, and NAME:VERSION for each version loaded now (each verified when it was loaded)."""
    return handler(request).models()


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
        raise ModelcdError(
            f"--chaos injects faults into classify requests; {inputs.model} is a causal LM, served through the OpenAI API without it"
        )
    policy = inputs.policy
    pool = LmPool(inputs.model, inputs.registry, inputs.home, policy.serving, policy.safety.limits(), threads=None)
    return create_lm_app(
        pool, admin_token=inputs.admin_token, poll_seconds=policy.serving.poll_seconds, node_usd_per_hour=policy.cost.node_usd_per_hour
    )


def create_lm_app(pool: LmPool, *, admin_token: str | None, poll_seconds: float, node_usd_per_hour: float) -> FastAPI:
    metrics = LmServerMetrics(live_drift=LiveDriftCollector(pool.state_root, pool.model))
    policy = pool.policy
    generations = Generations(pool.model, policy, metrics, node_usd_per_hour)
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
    base.app.state.completions = CompletionHandler(
        pool, metrics, generations, base.swapper, base.traffic, base.sampler, base.rollout, base.shadow
    )
    base.app.include_router(router)
    return base.app
