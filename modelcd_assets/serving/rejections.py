"""A classify request's limits, checked before any JSON model or tokenizer sees it: body bytes, texts, characters per text.

A request beyond them is answered at once (413 or 422, naming the limit and its value) and counted by reason in
modelcd_requests_rejected_total, never as a request of a version: oversized traffic cannot move the latency the SLO is
judged on, nor trigger a rollback.
"""

from __future__ import annotations

import json

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from modelcd_assets.lib.judging.policy import ServingPolicy

# Why a classify request was answered before it reached a model (modelcd_requests_rejected_total's reason label).
BODY_TOO_LARGE, TEXT_TOO_LONG, TOO_MANY_TEXTS, BAD_REQUEST = "body_too_large", "text_too_long", "too_many_texts", "bad_request"
UNKNOWN_VERSION, NOT_READY = "unknown_version", "not_ready"
REJECT_REASONS = (BODY_TOO_LARGE, TEXT_TOO_LONG, TOO_MANY_TEXTS, BAD_REQUEST, UNKNOWN_VERSION, NOT_READY)


class ClassifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    texts: list[str] = Field(
        min_length=1,
        description="Texts to classify, all served by one version (at most serving.max_texts, each at most serving.max_text_chars).",
    )
    adapter: str | None = Field(
        None, max_length=64, description="Registry version of a loaded adapter; default: the version the server follows."
    )


class Rejected(Exception):
    """A classify request answered before it reached a model: counted by reason, never as a request of a version."""

    def __init__(self, status: int, reason: str, message: str, limit: str | None = None, value: int | None = None):
        super().__init__(message)
        self.status, self.reason, self.limit, self.value = status, reason, limit, value

    def response(self) -> JSONResponse:
        body = {"error": str(self), "reason": self.reason}
        if self.limit is not None:
            body.update(limit=self.limit, value=self.value)
        return JSONResponse(body, status_code=self.status)


async def read_json(request: Request, limit: int) -> object:
    """The request's JSON body, refused (Rejected) beyond limit bytes: on its Content-Length before a byte is read, and
    while it streams for a body without one."""

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
    try:
        return json.loads(b"".join(chunks))
    except (ValueError, RecursionError) as e:
        raise Rejected(422, BAD_REQUEST, f"the request body is not JSON: {e}") from None


async def read_classify(request: Request, policy: ServingPolicy) -> ClassifyRequest:
    """The classify body, refused (Rejected) beyond the serving limits before any JSON model or tokenizer sees it."""
    raw = await read_json(request, policy.max_body_bytes)
    texts = raw.get("texts") if isinstance(raw, dict) else None
    if isinstance(texts, list):
        if len(texts) > policy.max_texts:
            raise Rejected(
                422,
                TOO_MANY_TEXTS,
                f"{len(texts)} texts in one request, more than serving.max_texts ({policy.max_texts})",
                "serving.max_texts",
                policy.max_texts,
            )
        for i, text in enumerate(texts):
            if isinstance(text, str) and len(text) > policy.max_text_chars:
                raise Rejected(
                    422,
                    TEXT_TOO_LONG,
                    f"text {i} has {len(text)} characters, more than serving.max_text_chars ({policy.max_text_chars})",
                    "serving.max_text_chars",
                    policy.max_text_chars,
                )
    try:
        body = ClassifyRequest.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in err['loc']) or 'body'}: {err['msg']}" for err in e.errors(include_url=False, include_input=False)
        )
        raise Rejected(422, BAD_REQUEST, f"not a classify request: {problems}") from None
    for i, text in enumerate(body.texts):
        try:
            text.encode()
        except UnicodeEncodeError:  # a lone surrogate, which JSON can carry: the tokenizer would fail on it, as a server error
            raise Rejected(422, BAD_REQUEST, f"text {i} is not valid Unicode (it holds a lone surrogate)") from None
    return body
