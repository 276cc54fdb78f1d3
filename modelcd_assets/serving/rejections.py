"""Why a request is answered before it reaches a model, decided in one place for both APIs: the body's bytes and JSON,
a classify request's texts and characters, the version asked for, and a generation's prompt, tokens, KV cache and
concurrency.

A Rejected names its status, its reason and the limit it hit, and is checked before any JSON model, tokenizer or
model sees what it refuses. It is counted by reason in modelcd_requests_rejected_total (serving/accounting.py), never
as a request of a version: oversized or malformed traffic cannot move the latency or error ratio the SLO is judged on,
nor trigger a rollback. Each API answers it in its own error body (Rejected.response(), or the OpenAI body of
serving/lm/openai_api.ApiError).
"""

from __future__ import annotations

import json

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from modelcd_assets.lib.errors import BadCandidate
from modelcd_assets.lib.inference.tokens import check_generation_length
from modelcd_assets.lib.judging.policy import ServingPolicy

# Why a request was answered before it reached a model (modelcd_requests_rejected_total's reason label).
BODY_TOO_LARGE, TEXT_TOO_LONG, TOO_MANY_TEXTS, BAD_REQUEST = "body_too_large", "text_too_long", "too_many_texts", "bad_request"
UNKNOWN_VERSION, NOT_READY = "unknown_version", "not_ready"
PROMPT_TOO_LONG, MAX_TOKENS_TOO_LARGE, KV_CACHE_TOO_LARGE, TOO_MANY_GENERATIONS = (
    "prompt_too_long",
    "max_tokens_too_large",
    "kv_cache_too_large",
    "too_many_generations",
)
UNSUPPORTED = "unsupported"
# Exported at zero from the start by every server, and by a causal LM's with the generation's own.
REJECT_REASONS = (BODY_TOO_LARGE, TEXT_TOO_LONG, TOO_MANY_TEXTS, BAD_REQUEST, UNKNOWN_VERSION, NOT_READY)
GENERATION_REASONS = (PROMPT_TOO_LONG, MAX_TOKENS_TOO_LARGE, KV_CACHE_TOO_LARGE, TOO_MANY_GENERATIONS, UNSUPPORTED)

MIB = 2**20


class Rejected(Exception):
    """A request answered before it reached a model: counted by reason, never as a request of a version.

    limit and value name the policy bound it crossed; param, code, type and headers are what the OpenAI error body
    carries besides the message."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        limit: str | None = None,
        value: int | None = None,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str = "invalid_request_error",
        headers: dict | None = None,
    ):
        super().__init__(message)
        self.status, self.reason, self.limit, self.value = status, reason, limit, value
        self.param, self.code, self.type, self.headers = param, code, type, headers or {}

    def body(self) -> dict:
        body = {"error": str(self), "reason": self.reason}
        if self.limit is not None:
            body.update(limit=self.limit, value=self.value)
        return body

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


# Both APIs


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, refused (Rejected) beyond limit bytes: on its Content-Length before a byte is read, and while it
    streams for a body without one."""

    def too_large(size: str) -> Rejected:
        return Rejected(
            413,
            BODY_TOO_LARGE,
            f"the request body{size} is larger than serving.max_body_bytes ({limit} bytes)",
            "serving.max_body_bytes",
            limit,
        )

    declared = request.headers.get("content-length")
    if declared is not None:
        if not (declared.isascii() and declared.isdigit()):
            raise Rejected(400, BAD_REQUEST, "Content-Length is not a number of bytes")
        if int(declared) > limit:
            raise too_large(f" of {int(declared)} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large("")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request, limit: int, malformed: int = 422) -> object:
    """The request's JSON body, read by read_body; a body that is not JSON is answered with the status malformed (the
    classify API's 422, the OpenAI API's 400)."""
    raw = await read_body(request, limit)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise Rejected(malformed, BAD_REQUEST, f"the request body is not JSON: {e}") from None


def not_ready(model: str) -> Rejected:
    """No version is served yet (the follower has not loaded production)."""
    return Rejected(503, NOT_READY, f"no version of {model} is being served yet; the server is not ready", type="server_error")


def unknown_version(model: str, version: str) -> Rejected:
    """A version that is not loaded or was withdrawn; only the version asked for is named, since which versions are
    loaded is the admin API's to say."""
    return Rejected(404, UNKNOWN_VERSION, f"version {version} of {model} is not served here")


# The classify API


def check_texts(raw: object, policy: ServingPolicy) -> None:
    """Texts per request and characters per text, counted on the raw JSON before any JSON model or tokenizer sees it."""
    texts = raw.get("texts") if isinstance(raw, dict) else None
    if not isinstance(texts, list):
        return
    check_text_count(len(texts), policy)
    for i, text in enumerate(texts):
        if isinstance(text, str) and len(text) > policy.max_text_chars:
            raise Rejected(
                422,
                TEXT_TOO_LONG,
                f"text {i} has {len(text)} characters, more than serving.max_text_chars ({policy.max_text_chars})",
                "serving.max_text_chars",
                policy.max_text_chars,
            )


def check_text_count(count: int, policy: ServingPolicy) -> None:
    if count > policy.max_texts:
        raise Rejected(
            422,
            TOO_MANY_TEXTS,
            f"{count} texts in one request, more than serving.max_texts ({policy.max_texts})",
            "serving.max_texts",
            policy.max_texts,
        )


def not_a_classify_request(e: ValidationError) -> Rejected:
    problems = "; ".join(
        f"{'.'.join(str(x) for x in err['loc']) or 'body'}: {err['msg']}" for err in e.errors(include_url=False, include_input=False)
    )
    return Rejected(422, BAD_REQUEST, f"not a classify request: {problems}")


def check_unicode(texts: list[str]) -> None:
    for i, text in enumerate(texts):
        try:
            text.encode()
        except UnicodeEncodeError:  # a lone surrogate, which JSON can carry: the tokenizer would fail on it, as a server error
            raise Rejected(422, BAD_REQUEST, f"text {i} is not valid Unicode (it holds a lone surrogate)") from None


# The OpenAI API of a causal LM


def bad_request(message: str, param: str | None = None) -> Rejected:
    return Rejected(400, BAD_REQUEST, message, param=param)


def not_a_completion_request(e: ValidationError) -> Rejected:
    """The first problem pydantic found, named by its field as OpenAI's server does; a field OpenAI's API does not have is
    refused by name rather than ignored."""
    err = e.errors(include_url=False, include_input=False)[0]
    param = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in err["loc"]).lstrip(".") or None  # messages[0].role
    if err["type"] == "extra_forbidden":
        return Rejected(
            400,
            UNSUPPORTED,
            f"{param}: unknown field; this server takes the OpenAI API's fields and refuses any other rather than ignore it",
            param=param,
        )
    message = err["msg"].removeprefix("Value error, ")
    return bad_request(f"{param}: {message}" if param else message, param)


def check_choices(choices: int, policy: ServingPolicy) -> None:
    """n (times the prompts of a text completion): at most serving.max_choices, and never more than can run at once."""
    bound = min(policy.max_choices, policy.max_generations)
    if choices > bound:
        limit = "serving.max_choices" if policy.max_choices <= policy.max_generations else "serving.max_generations"
        raise Rejected(
            400,
            UNSUPPORTED,
            f"{choices} choices (n times the prompts) in one request, more than {limit} ({bound}); send fewer, or more requests",
            limit,
            bound,
            param="n",
        )


def no_such_model(name: str, model: str) -> Rejected:
    return Rejected(
        404,
        UNKNOWN_VERSION,
        f"The model `{name}` does not exist: this server serves {model} (production) and {model}:VERSION",
        param="model",
        code="model_not_found",
    )


def may_not_be_served(name: str, why: Exception) -> Rejected:
    """A version not loaded that could not be: no valid verdict over its bytes, or production was rolled back from it."""
    return Rejected(404, UNKNOWN_VERSION, f"The model `{name}` may not be served: {why}", param="model", code="model_not_found")


def check_prompt(prompt: list[int]) -> None:
    if not prompt:
        raise bad_request("the prompt is empty", "prompt")


def generation_bounds(
    policy: ServingPolicy,
    prompt_tokens: int,
    max_tokens: int | None,
    context_length: int,
    kv_bytes_per_token: int,
    prompt_param: str = "messages",
    limit_param: str = "max_tokens",
) -> tuple[int, int]:
    """The tokens a generation may make and the KV cache it preallocates, or Rejected (400, 413): the prompt (the request's
    field prompt_param) and max_tokens (the field limit_param) against the policy and the model's context
    (lib/inference/tokens.check_generation_length, the rule the gates use), and prompt + max_tokens times the model's bytes
    per token against serving.max_kv_cache_mb. A request without max_tokens gets serving.default_max_tokens, cut to what
    the context and the KV cache bound leave."""
    p = policy
    if prompt_tokens > p.max_prompt_tokens:
        raise Rejected(
            400,
            PROMPT_TOO_LONG,
            f"the prompt has {prompt_tokens} tokens, more than serving.max_prompt_tokens ({p.max_prompt_tokens})",
            param=prompt_param,
            code="context_length_exceeded",
        )
    if max_tokens is not None and max_tokens > p.max_completion_tokens:
        raise Rejected(
            400,
            MAX_TOKENS_TOO_LARGE,
            f"{limit_param} {max_tokens} is more than serving.max_completion_tokens ({p.max_completion_tokens})",
            param=limit_param,
        )
    kv_tokens = int(p.max_kv_cache_mb * MIB // kv_bytes_per_token)  # tokens of context the KV cache bound holds
    default = min(p.default_max_tokens, context_length - prompt_tokens, kv_tokens - prompt_tokens)
    new = max_tokens if max_tokens is not None else max(1, default)
    try:
        check_generation_length(prompt_tokens, new, context_length)
    except BadCandidate as e:
        raise Rejected(
            400, PROMPT_TOO_LONG, str(e), param=prompt_param if max_tokens is None else "max_tokens", code="context_length_exceeded"
        ) from None
    kv = (prompt_tokens + new) * kv_bytes_per_token
    if kv > p.max_kv_cache_mb * MIB:
        what, do = (
            ("prompt + max_tokens", "ask for fewer max_tokens")
            if max_tokens is not None
            else ("the prompt + 1 token", "send a shorter prompt")
        )
        raise Rejected(
            413,
            KV_CACHE_TOO_LARGE,
            f"{what} ({prompt_tokens} + {new} tokens) need {kv / MIB:.2f} MiB of KV cache, more than "
            f"serving.max_kv_cache_mb ({p.max_kv_cache_mb:g}); {do}",
            param="max_tokens" if max_tokens is not None else prompt_param,
        )
    return new, kv


def check_generations(running: int, policy: ServingPolicy) -> None:
    """At most serving.max_generations at once; the client is told when to retry."""
    if running >= policy.max_generations:
        raise Rejected(
            429,
            TOO_MANY_GENERATIONS,
            f"{running} generations are running, serving.max_generations; retry after {policy.retry_after_s} s",
            type="rate_limit_error",
            code="rate_limit_exceeded",
            headers={"Retry-After": str(policy.retry_after_s)},
        )


def not_served(model: str, version: str | None, ready: bool) -> Rejected:
    """A version asked for (None: the default) that the pool does not answer: not ready while none is served yet."""
    return unknown_version(model, version) if ready else not_ready(model)
