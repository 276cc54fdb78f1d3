"""What answers the OpenAI API of a causal LM: a request read and parsed, resolved to one version (loaded on first use
only with a valid verdict over its bytes), admitted within its bounds, and generated, whole or streamed as server-sent
events; one account per request."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import re
import time
from dataclasses import replace

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from modelcd_assets.lib.causal_lm.decoder import NonFinite, Sampling
from modelcd_assets.lib.causal_lm.tool_calls import HERMES, CallSplit
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.operations.traffic_log import TrafficLog
from modelcd_assets.lib.release.servable import NotServable
from modelcd_assets.serving import ARM_HEADER, served_headers
from modelcd_assets.serving.accounting import RequestAccount
from modelcd_assets.serving.admin import Swapper
from modelcd_assets.serving.lm.chaos import INJECTED, LmFaultRequest
from modelcd_assets.serving.lm.generation import Admitted, Generations, TokenStream, Yielded
from modelcd_assets.serving.lm.openai_api import (
    Answer,
    ApiError,
    ChatRequest,
    CompletionRequest,
    Logprobs,
    StopCut,
    error_body,
    fingerprint,
    parse,
    tool_calls,
    usage,
)
from modelcd_assets.serving.lm.pool import LmPool, LmServed
from modelcd_assets.serving.metrics import LmServerMetrics
from modelcd_assets.serving.rejections import (
    Rejected,
    bad_request,
    check_choices,
    check_prompt,
    may_not_be_served,
    no_such_model,
    not_ready,
    read_json,
)
from modelcd_assets.serving.rollout import RolloutFollower, caller_of
from modelcd_assets.serving.sampler import Sampler
from modelcd_assets.serving.shadow import ShadowLane
from modelcd_assets.serving.versions import UnknownVersion

log = logging.getLogger("modelcd.serve")


class CompletionAccount(RequestAccount):
    """A generation's account: prompt and generated tokens, time to the first token (from the request's arrival) and per
    token after it."""

    metrics: LmServerMetrics

    def __init__(self, metrics: LmServerMetrics, model: str):
        super().__init__(metrics, model)
        self.made, self.eos = 0, 0
        self.first: float | None = None  # when the first token of any of its choices was made

    @property
    def completion_tokens(self) -> int:
        return self.made + self.eos

    def prompt(self, tokens: int) -> None:
        self.metrics.prompt_tokens.labels(*self.labels).inc(tokens)

    def token(self) -> None:
        """A choice made a token."""
        self.made += 1
        if self.first is None:
            self.first = time.perf_counter()

    def ended_turn(self) -> None:
        """A choice's model generated EOS, which counts as a token."""
        self.eos += 1

    def finish(self, failed: bool) -> None:
        """Observed at the answer's end, TTFT included, so that a shadow copy stopped before it (abandon) is in no series."""
        super().finish(failed)
        if self.first is not None:
            self.metrics.ttft.labels(*self.labels).observe(self.first - self.started)
        self.metrics.completion_tokens.labels(*self.labels).inc(self.completion_tokens)
        if not failed:
            self.metrics.answer_tokens.labels(*self.labels).observe(self.completion_tokens)
            if self.completion_tokens:
                self.metrics.token_cost.labels(*self.labels).observe(self.cost_usd / self.completion_tokens * 1e6)
        if self.eos:
            self.metrics.answers_at_eos.labels(*self.labels).inc()
        if self.first is not None and self.made > 1:
            self.metrics.tpot.labels(*self.labels).observe((time.perf_counter() - self.first) / (self.made - 1))


class Choice:
    """One admitted generation of a request: its text cut at the stop sequences, the logprobs of the tokens sent, why it
    finished, and the error it failed with (answered, never dropped)."""

    def __init__(
        self, index: int, prompt: list[int], admitted: Admitted, tokens: TokenStream, account: CompletionAccount, stops: list[str]
    ):
        self.index, self.prompt, self.admitted, self.tokens, self.account, self.stops = index, prompt, admitted, tokens, account, stops
        self.finish_reason = "length"
        self.made = 0
        self.first_token: int | None = None
        self.eos = False
        self.error: dict | None = None  # the OpenAI error body of a generation that failed
        self.fault: LmFaultRequest | None = None  # --chaos: the fault injected into its version (lm/chaos.py)

    @property
    def completion_tokens(self) -> int:
        return self.made + self.eos

    async def pieces(self):
        """(text, the Chosen steps whose tokens it holds) to send, piece by piece, cut at a stop sequence; the finish reason
        and any error land on self. A token whose text is held back (a piece of a character, or of a stop sequence) is sent
        with the text that follows it; one inside the stop sequence is not sent."""
        cut, held = StopCut(self.stops), []
        try:
            if self.fault is not None:
                await asyncio.sleep(self.fault.latency_ms / 1000)
                if random.random() < self.fault.error_ratio:
                    self.error = error_body(INJECTED)
                    return
            async for step, piece in self.tokens:
                self.account.token()
                self.made += 1
                if self.first_token is None:
                    self.first_token = step.token
                held.append(step)
                text = cut.feed(piece)
                if text:
                    yield text, held
                    held = []
                if cut.stopped:
                    self.finish_reason = "stop"
                    return
            if self.made < self.admitted.max_new_tokens:  # the model ended its turn
                self.finish_reason, self.eos = "stop", True
                self.account.ended_turn()
            rest = cut.flush()
            if rest or held:
                yield rest, held
        except Yielded:  # a shadow copy that found no room in time: dropped by the lane, never an error of its version
            raise
        except NonFinite as e:
            self.account.non_finite()
            self.error = error_body(f"generation stopped: {e}", code="non_finite_logits")
        except Exception as e:  # a failed generation is counted and answered, never dropped
            log.exception("generation failed")
            self.error = error_body(f"generation failed: {e}")
        finally:
            await self.tokens.aclose()


class Completion:
    """One request's answer, whole or streamed: its choices (n, times the prompts of a text completion), each a generation of
    its own, with logprobs, echo and tool calls as the request asked; usage for all of them; a failed choice answers the
    request with its error."""

    def __init__(
        self, chat: bool, body: ChatRequest | CompletionRequest, served: LmServed, choices: list[Choice], account: CompletionAccount
    ):
        self.chat, self.body, self.served, self.choices, self.account = chat, body, served, choices, account
        self.answer = Answer(chat, f"{served.model}:{served.version}", fingerprint(served.content_hash, served.artifact_sha256))
        self.headers = served_headers(served)
        self.after = None  # called with this completion once it has finished, however it ended (a shadow copy is offered there)
        self.echo: list[str] = [""] * len(choices)  # a text completion's echoed prompt, per choice
        self.reads_calls = chat and body.reads_calls()
        top = body.logprobs_top()
        decoder = served.decoder
        self.logprobs = [Logprobs(chat, decoder.token_text) if top is not None else None for _ in choices]

    @property
    def error(self) -> dict | None:
        return next((c.error for c in self.choices if c.error is not None), None)

    @property
    def prompt(self) -> list[int]:
        return self.choices[0].prompt

    def usage(self) -> dict:
        prompts = {id(c.prompt): len(c.prompt) for c in self.choices}  # a prompt asked n times is counted once, as OpenAI counts it
        return usage(sum(prompts.values()), self.account.completion_tokens)

    def _ending(self, choice: Choice, text: str) -> tuple[str | None, str, list[dict] | None]:
        """(content, finish reason, tool calls) of a finished choice whose whole text is text."""
        if self.reads_calls and choice.finish_reason == "stop":
            read = tool_calls(self.body, text)
            if read is not None:
                return read[0], "tool_calls", read[1]
        return text, choice.finish_reason, None

    def finish(self) -> None:
        self.account.finish(failed=self.error is not None)
        if self.after is not None:
            self.after(self)

    async def _whole_choice(self, choice: Choice) -> dict:
        texts, steps = [self.echo[choice.index]], []
        async for text, chosen in choice.pieces():
            texts.append(text)
            steps += chosen
        content, finish, calls = self._ending(choice, "".join(texts))
        lp = self.logprobs[choice.index]
        return self.answer.choice(choice.index, content, finish, lp.of(steps) if lp else None, calls)

    async def whole(self, request: Request) -> Response:
        """The answer once every choice has finished; a client that goes away first stops them, as a stream's does (its
        generations end with the token in hand and free their caches), and gets nothing."""
        answer = asyncio.ensure_future(asyncio.gather(*(self._whole_choice(c) for c in self.choices)))
        watch = asyncio.ensure_future(_gone(request))
        try:
            await asyncio.wait((answer, watch), return_when=asyncio.FIRST_COMPLETED)
            if not answer.done():  # counted as a stream whose client left is: the tokens made, no error of the version
                answer.cancel()
                return Response(status_code=499)  # nginx's "client closed request": nobody reads it
            choices = answer.result()
        finally:
            watch.cancel()
            for c in self.choices:
                await c.tokens.aclose()
            self.finish()
        if self.error is not None:
            return JSONResponse(self.error, status_code=500, headers=self.headers)
        return JSONResponse(self.answer.whole(list(choices), self.usage()), headers=self.headers)

    def streamed(self) -> EventSourceResponse:
        return EventSourceResponse(self._events(), headers=self.headers, ping=15)

    async def _choice_events(self, choice: Choice, out: asyncio.Queue) -> None:
        """choice's events onto out, then None. An answer read for tool calls streams its text up to where a call may begin
        (all of it held, for a call in JSON alone); the calls are sent whole at the end with their tokens' logprobs, or,
        where the rest is not a call, it is sent as text."""
        usage, lp, i = self.body.include_usage, self.logprobs[choice.index], choice.index
        await out.put(self.answer.chunk(i, "" if self.chat else self.echo[i] or None, first=True, usage=usage))
        split = CallSplit(calling=self.body.tool_form != HERMES) if self.reads_calls else None
        sent, steps = [], []
        async for text, chosen in choice.pieces():
            steps += chosen
            if split is not None and not (text := split.feed(text)):
                continue  # held: its tokens' logprobs go with the text they end up in
            sent.append(text)
            await out.put(self.answer.chunk(i, text, logprobs=lp.of(steps) if lp else None, usage=usage))
            steps = []
        if choice.error is None:
            finish = choice.finish_reason
            if split is not None:
                held = split.held()
                _, finish, calls = self._ending(choice, "".join(sent) + held)
                if calls:
                    calls = [{"index": j} | c for j, c in enumerate(calls)]
                    await out.put(self.answer.chunk(i, None, logprobs=lp.of(steps) if lp else None, tool_calls=calls, usage=usage))
                elif held or steps:
                    await out.put(self.answer.chunk(i, held, logprobs=lp.of(steps) if lp else None, usage=usage))
            await out.put(self.answer.chunk(i, None, finish, usage=usage))
        await out.put(None)

    async def _events(self):
        """Every choice's events as they come; then, with include_usage, one event of usage alone; then [DONE]. A choice that
        failed is sent as an error event, and the stream ends with [DONE] as every stream does."""
        out: asyncio.Queue = asyncio.Queue()
        tasks = [asyncio.ensure_future(self._choice_events(c, out)) for c in self.choices]
        try:
            running = len(tasks)
            while running:
                event = await out.get()
                if event is None:
                    running -= 1
                    if self.error is not None:
                        break
                    continue
                yield {"data": json.dumps(event)}
            if self.error is not None:
                yield {"data": json.dumps(self.error)}
            elif self.body.include_usage:
                yield {"data": json.dumps(self.answer.usage_chunk(self.usage()))}
            yield {"data": "[DONE]"}
        finally:  # also when the client went away: each generation stops with the token in hand
            for task in tasks:
                task.cancel()
            for c in self.choices:
                await c.tokens.aclose()
            self.finish()


async def _gone(request: Request, every_s: float = 0.1) -> None:
    """Returns once the client has gone away (ASGI's http.disconnect)."""
    while not await request.is_disconnected():
        await asyncio.sleep(every_s)


class CompletionHandler:
    """Chat and text completions, and the models they may name, for one pool.

    The `model` field picks what answers: NAME follows production (the alias the server follows); NAME:VERSION is that
    version, loaded on first use only with a valid verdict over its bytes and never once production was rolled back from
    it; anything else is 404. A generation runs start to end on the version it was admitted with."""

    def __init__(
        self,
        pool: LmPool,
        metrics: LmServerMetrics,
        generations: Generations,
        swapper: Swapper,
        traffic: TrafficLog,
        sampler: Sampler,
        rollout: RolloutFollower,
        shadow: ShadowLane,
    ):
        self.pool, self.metrics, self.generations, self.swapper = pool, metrics, generations, swapper
        self.traffic, self.sampler, self.rollout, self.shadow = traffic, sampler, rollout, shadow
        self.faults: dict[str, LmFaultRequest] = {}  # --chaos only: the admin API's route to it exists only then

    def inject(self, body: LmFaultRequest) -> dict:
        """Chaos testing: set (or, all zero, clear) a version's fault."""
        if body.clears:
            self.faults.pop(body.version, None)
        else:
            self.faults[body.version] = body
        return {"faults": {v: f.model_dump() for v, f in self.faults.items()}}

    def _generate(
        self, served: LmServed, prompts: list[list[int]], admitted: list[Admitted], body, account, chat: bool, sampling: Sampling
    ) -> Completion:
        """A completion with a choice per prompt by served within its admitted bounds, with its version's injected fault, if
        any. Choice i of a seeded request samples with seed + i, so that its choices differ and each repeats."""
        fault = self.faults.get(served.version)
        choices = []
        for i, (prompt, bounds) in enumerate(zip(prompts, admitted)):
            least = bounds.max_new_tokens if fault is not None and fault.ignore_eos else 0
            seed = None if sampling.seed is None else sampling.seed + i
            tokens = self.generations.tokens(served, prompt, bounds, replace(sampling, min_new_tokens=least, seed=seed))
            choice = Choice(i, prompt, bounds, tokens, account, body.stops)
            choice.fault = fault
            choices.append(choice)
        return Completion(chat, body, served, choices, account)

    def models(self) -> dict:
        """NAME while production is served, and NAME:VERSION for each version loaded now (each verified when it was loaded)."""
        pool = self.pool
        active, withdrawn = pool.active, pool.withdrawn
        data = [{"id": pool.model, "object": "model", "created": 0, "owned_by": "modelcd", "version": active.version}] if active else []
        data += [
            {"id": f"{pool.model}:{s.version}", "object": "model", "created": 0, "owned_by": "modelcd", "version": s.version}
            for s in pool.loaded()
            if s.version not in withdrawn
        ]
        return {"object": "list", "data": data}

    def model(self, model_id: str) -> dict:
        """One of models()'s entries by its id, or Rejected (404 model_not_found)."""
        found = next((m for m in self.models()["data"] if m["id"] == model_id), None)
        if found is None:
            raise no_such_model(model_id, self.pool.model)
        return found

    async def resolve(self, name: str) -> LmServed:
        """The version `model` names, or Rejected (404, or 503 before production is served)."""
        pool = self.pool
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
            await self.swapper.swap_async(version, activate=False)
            return pool.resolve(version)
        except (NotServable, ModelcdError) as e:
            raise may_not_be_served(name, e) from None

    async def create(self, request: Request, chat: bool):
        """A chat (chat=True) or text completion, whole or streamed; refused in the OpenAI error body before a token is generated."""
        account = CompletionAccount(self.metrics, self.pool.model)
        try:
            raw = await read_json(request, self.pool.policy.max_body_bytes, malformed=400)
            body = parse(ChatRequest if chat else CompletionRequest, raw)
            served = await self.resolve(body.model)
            # NAME is production's, or, at a canary step, the candidate's for a canaried caller (the `user` field, else the
            # X-Modelcd-Caller header, else the client's address).
            split = self.rollout.split if ":" not in body.model else None
            candidate = self.rollout.candidate() if split is not None else None
            canary = candidate is not None and split.canaried(caller_of(request, body.user))
            if canary:
                served = candidate
            decoder = served.decoder
            prompts = self._prompts(body, decoder, chat)
            check_choices(len(prompts) * body.choices, self.pool.policy)
            sampling = body.sampling(decoder.vocab_size)
            if sampling.guidance is not None:
                try:
                    decoder.check_guidance(*sampling.guidance)
                except ValueError as e:
                    param = body.guidance_param() if chat else None
                    raise bad_request(f"{param}: the constraint cannot be decoded: {e}", param) from None
            prompts = [p for p in prompts for _ in range(body.choices)]
            admitted = self.generations.admit_all(
                [len(p) for p in prompts],
                body.limit,
                decoder.context_length,
                decoder.kv_bytes_per_token,
                prompt_param="messages" if chat else "prompt",
                limit_param="max_completion_tokens" if chat and body.max_completion_tokens else "max_tokens",
            )
        except Rejected as r:
            return ApiError.of(account.reject(r)).response()
        if self.traffic.chosen():
            self.sampler.submit(served.version, [body.sampled_text()])
        account.admit(served)
        account.prompt(sum(len(p) for p in prompts[:: body.choices]))
        completion = self._generate(served, prompts, admitted, body, account, chat, sampling)
        if not chat and body.echo:
            completion.echo = [p if isinstance(p, str) else decoder.decode(p) for p in body.prompts() for _ in range(body.choices)]
        if canary:
            completion.headers[ARM_HEADER] = "canary"
        elif candidate is not None and split.shadowed() and len(prompts) == 1:
            completion.after = lambda answered: self._offer_shadow(candidate, answered)
        return completion.streamed() if body.stream else await completion.whole(request)

    @staticmethod
    def _prompts(body, decoder, chat: bool) -> list[list[int]]:
        """Each prompt's token ids (a chat's, in its template), or Rejected (400) for one the model cannot take."""
        if chat:
            try:
                messages, tools = body.chat(decoder.tool_form)
                prompts = [decoder.encode_chat(messages, tools=tools)]
            except ValueError as e:  # a content part that is not text
                raise bad_request(str(e), "messages") from None
            except RuntimeError as e:  # the chat template refused the conversation (its raise_exception), in its own words
                words = re.sub(r"\s+at row \d+, column \d+:?$", "", str(e).splitlines()[0] if str(e) else type(e).__name__)
                raise bad_request(f"the chat template refused the messages: {words}", "messages") from None
        else:
            prompts = []
            for i, p in enumerate(body.prompts()):
                if isinstance(p, str):
                    prompts.append(decoder.encode(p))
                    continue
                outside = [t for t in p if not 0 <= t < decoder.vocab_size]
                if outside:
                    raise bad_request(
                        f"prompt {i} holds token {outside[0]}; the model's vocabulary has {decoder.vocab_size} tokens", "prompt"
                    )
                prompts.append(list(p))
        for p in prompts:
            check_prompt(p)
        return prompts

    def _offer_shadow(self, candidate: LmServed, answered: Completion) -> None:
        if answered.error is None:
            self.shadow.offer(lambda: self._shadow(candidate, answered))

    async def _shadow(self, candidate: LmServed, answered: Completion) -> dict | None:
        """A copy of a generation production finished, generated by the candidate with the same prompt, bounds and sampling,
        counted in its series, and compared: the first token (greedy generations only, since sampled ones differ by chance),
        and the answer's length. It runs in the background (lm/generation.py): a token at a time while there is room beside
        the callers' generations; one that waited too long for it is dropped, as the lane drops one, and counted nowhere else."""
        body, prompt = answered.body, answered.prompt
        account = CompletionAccount(self.metrics, self.pool.model)
        try:
            decoder = candidate.decoder
            admitted = self.generations.admit(len(prompt), body.limit, decoder.context_length, decoder.kv_bytes_per_token, background=True)
            sampling = body.sampling(decoder.vocab_size)
        except Rejected:
            self.metrics.shadow_dropped.labels(self.pool.model).inc()
            return None
        account.admit(candidate)
        copy = self._generate(candidate, [prompt], [admitted], body, account, answered.chat, sampling)
        try:
            text = "".join([p async for p, _ in copy.choices[0].pieces()])
        except Yielded:
            account.abandon()
            self.metrics.shadow_dropped.labels(self.pool.model).inc()
            return None
        account.prompt(len(prompt))
        copy.finish()
        ours, theirs = copy.choices[0], answered.choices[0]
        greedy = sampling.greedy
        record = {"ts": time.time(), "production": answered.served.version, "candidate": candidate.version, "prompt_tokens": len(prompt)}
        if copy.error is not None:
            return {**record, "candidate_error": copy.error["error"]["message"]}
        labels = account.labels
        if greedy:
            self.metrics.shadow_pairs.labels(*labels).inc()
            if ours.first_token == theirs.first_token:
                self.metrics.shadow_agreements.labels(*labels).inc()
            if theirs.eos:  # production ended its turn: did the candidate, on the same prompt?
                self.metrics.shadow_eos_pairs.labels(*labels).inc()
                if ours.eos:
                    self.metrics.shadow_eos_kept.labels(*labels).inc()
        ratio = math.log2(max(ours.completion_tokens, 1) / max(theirs.completion_tokens, 1))
        self.metrics.length_ratio.labels(*labels).observe(ratio)
        return {
            **record,
            "greedy": greedy,
            "first_token": {"production": theirs.first_token, "candidate": ours.first_token},
            "tokens": {"production": theirs.completion_tokens, "candidate": ours.completion_tokens},
            "eos": {"production": bool(theirs.eos), "candidate": bool(ours.eos)},
            "log2_length_ratio": ratio,
            "candidate_text": text,
        }
