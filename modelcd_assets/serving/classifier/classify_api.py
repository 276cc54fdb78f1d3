"""The classify API's shapes: its request, read within the serving limits (serving/rejections.py), and the chaos
endpoint's fault."""

from __future__ import annotations

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from modelcd_assets.lib.judging.policy import ServingPolicy
from modelcd_assets.serving.rejections import check_texts, check_unicode, not_a_classify_request, read_json


class ClassifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    texts: list[str] = Field(
        min_length=1,
        description="Texts to classify, all served by one version (at most serving.max_texts, each at most serving.max_text_chars).",
    )
    adapter: str | None = Field(
        None, max_length=64, description="Registry version of a loaded adapter; default: the version the server follows."
    )


CLASSIFY_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": ClassifyRequest.model_json_schema()}}}}


class FaultRequest(BaseModel):
    """Chaos testing: make a version slow, failing or NaN-producing, as a real regression would."""

    model_config = ConfigDict(extra="forbid")
    version: str = Field(pattern=r"^[0-9]+$")
    latency_ms: float = Field(0.0, ge=0, le=60_000)
    error_ratio: float = Field(0.0, ge=0, le=1)
    nan_ratio: float = Field(0.0, ge=0, le=1)


async def read_classify(request: Request, policy: ServingPolicy) -> ClassifyRequest:
    """The classify body, refused (Rejected) beyond the serving limits before any JSON model or tokenizer sees it."""
    raw = await read_json(request, policy.max_body_bytes)
    check_texts(raw, policy)
    try:
        body = ClassifyRequest.model_validate(raw)
    except ValidationError as e:
        raise not_a_classify_request(e) from None
    check_unicode(body.texts)
    return body
