"""The public app of a causal LM's server: the OpenAI API (chat and text completions, whole or streamed as server-sent
events, and the models it serves), health, readiness and metrics; its admin API is app.state.admin_app, as the
classifier's.

The `model` field picks what answers: NAME follows production (the alias the server follows); NAME:VERSION is that
version, loaded on first use only with a valid verdict over its bytes and never once production was rolled back from
it; anything else is 404. A generation runs start to end on the version it was admitted with. Every bound is checked
before a token is generated (serving/generation.py); a request refused is counted by reason in
modelcd_requests_rejected_total, never in a version's series, which slo_sensor judges.
"""

from __future__ import annotations

import json
import logging
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse

from modelcd_assets.lib.causal_lm.decoder import NonFinite, Sampling
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.release.servable import NotServable
from modelcd_assets.serving import ARTIFACT_HEADER, HASH_HEADER, VERSION_HEADER
from modelcd_assets.serving.base_app import base_app
from modelcd_assets.serving.lm.generation import Generations
from modelcd_assets.serving.lm.openai_api import Answer, ApiError, ChatRequest, CompletionRequest, StopCut, error_body, parse, usage
from modelcd_assets.serving.lm.pool import LmPool, LmServed
from modelcd_assets.serving.metrics import LiveDriftCollector, LmServerMetrics
from modelcd_assets.serving.rejections import (
    GENERATION_REASONS,
    REJECT_REASONS,
    Rejected,
    bad_request,
    check_prompt,
    may_not_be_served,
    no_such_model,
    not_ready,
    read_json,
)
from modelcd_assets.serving.server import ServerInputs
from modelcd_assets.serving.versions import UnknownVersion

log = logging.getLogger("modelcd.serve")
LM_REJECT_REASONS = (*REJECT_REASONS, *GENERATION_REASONS)


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
    sc = base_app(
        pool,
        metrics,
        LM_REJECT_REASONS,
        admin_token=admin_token,
        poll_seconds=poll_seconds,
        closers=(generations.close,),
        description=f"Serves {pool.model}, a causal LM, through the OpenAI API, following its production alias.",
    )
    app, traffic, sampler, swapper = sc.app, sc.traffic, sc.sampler, sc.swapper
    for a in (app, sc.admin):
        a.state.generations = generations

    @app.get("/v1/models")
    async def models():
        """NAME while production is served, and NAME:VERSION for each version loaded now (each verified when it was loaded)."""
        active = pool.active
        withdrawn = pool.withdrawn
        data = [{"id": pool.model, "object": "model", "created": 0, "owned_by": "modelcd", "version": active.version}] if active else []
        data += [
            {"id": f"{pool.model}:{s.version}", "object": "model", "created": 0, "owned_by": "modelcd", "version": s.version}
            for s in pool.loaded()
            if s.version not in withdrawn
        ]
        return {"object": "list", "data": data}

    async def resolve(name: str) -> LmServed:
        model, _, version = name.partition(":")
        if model != pool.model or (version and not version.isdigit()):
            raise no_such_model(name, pool.model)
        if not version:
            if pool.active is None:
                raise not_ready(pool.model)
            return pool.active
        try:
            return pool.resolve(version)
        except UnknownVersion:
            pass
        try:  # not loaded: loaded now, only with a valid verdict over its bytes, and never once production was rolled back from it
            await swapper.swap_async(version, activate=False)
            return pool.resolve(version)
        except (NotServable, ModelcdError) as e:
            raise may_not_be_served(name, e) from None

    async def complete(request: Request, chat: bool):
        started = time.perf_counter()
        try:
            raw = await read_json(request, policy.max_body_bytes)
            body = parse(ChatRequest if chat else CompletionRequest, raw)
            served = await resolve(body.model)
            decoder = served.decoder
            try:
                prompt = decoder.encode_chat(body.chat()) if chat else decoder.encode(body.text())
            except ValueError as e:
                raise bad_request(str(e), "messages" if chat else "prompt") from None
            check_prompt(prompt)
            admitted = generations.admit(len(prompt), body.limit, decoder.context_length, decoder.kv_bytes_per_token)
        except Rejected as r:
            metrics.rejected.labels(pool.model, r.reason).inc()
            return ApiError.of(r).response()
        if traffic.chosen():
            sampler.submit(served.version, [body.sampled_text()])
        labels = (served.model, served.version, served.adapter_label)
        metrics.prompt_tokens.labels(*labels).inc(len(prompt))
        answer = Answer(chat, f"{served.model}:{served.version}")
        headers = {HASH_HEADER: served.content_hash, VERSION_HEADER: served.version, ARTIFACT_HEADER: served.artifact_sha256}
        sampling = Sampling(body.temperature, body.top_p, body.seed)
        tokens = generations.tokens(served, prompt, admitted, sampling)
        state = {"made": 0, "eos": 0, "first": None, "finish": "length", "error": None}

        async def pieces():
            """The text to send, piece by piece, cut at a stop sequence; the finish reason and any error land in state."""
            cut = StopCut(body.stops)
            try:
                async for _, piece in tokens:
                    state["made"] += 1
                    if state["first"] is None:
                        state["first"] = time.perf_counter()
                        metrics.ttft.labels(*labels).observe(state["first"] - started)
                    text = cut.feed(piece)
                    if text:
                        yield text
                    if cut.stopped:
                        state["finish"] = "stop"
                        return
                if state["made"] < admitted.max_new_tokens:  # the model ended its turn: EOS was generated, and counts as a token
                    state["finish"], state["eos"] = "stop", 1
                if rest := cut.flush():
                    yield rest
            except NonFinite as e:
                metrics.nan_outputs.labels(*labels).inc()
                state["error"] = error_body(f"generation stopped: {e}", code="non_finite_logits")
            except Exception as e:  # a failed generation is counted and answered, never dropped
                log.exception("generation failed on %s version %s", served.model, served.version)
                state["error"] = error_body(f"generation failed: {e}")
            finally:
                await tokens.aclose()

        def finish() -> None:
            metrics.requests.labels(*labels).inc()
            metrics.completion_tokens.labels(*labels).inc(state["made"] + state["eos"])
            if state["error"] is not None:
                metrics.errors.labels(*labels).inc()
            if state["first"] is not None and state["made"] > 1:
                metrics.tpot.labels(*labels).observe((time.perf_counter() - state["first"]) / (state["made"] - 1))

        if not body.stream:
            text = "".join([p async for p in pieces()])
            finish()
            if state["error"] is not None:
                return JSONResponse(state["error"], status_code=500, headers=headers)
            return JSONResponse(answer.whole(text, state["finish"], usage(len(prompt), state["made"] + state["eos"])), headers=headers)

        async def events():
            try:
                yield {"data": json.dumps(answer.chunk("" if chat else None, first=True))}
                async for text in pieces():
                    yield {"data": json.dumps(answer.chunk(text))}
                if state["error"] is not None:
                    yield {"data": json.dumps(state["error"])}
                else:
                    yield {"data": json.dumps(answer.chunk(None, state["finish"], usage(len(prompt), state["made"] + state["eos"])))}
                    yield {"data": "[DONE]"}
            finally:  # also when the client went away: the generation stops with the token in hand
                await tokens.aclose()
                finish()

        return EventSourceResponse(events(), headers=headers, ping=15)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await complete(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await complete(request, chat=False)

    return app
