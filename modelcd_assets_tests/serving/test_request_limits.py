"""The request limits on their own (serving/rejections.py): read_classify's, checked before anything parses the texts, and a
generation's bounds; every limit at, and one past, its value."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.requests import Request

from modelcd_assets.lib.judging.policy import ServingPolicy
from modelcd_assets.serving.classifier.classify_api import ClassifyRequest, read_classify
from modelcd_assets.serving.rejections import (
    BAD_REQUEST,
    BODY_TOO_LARGE,
    KV_CACHE_TOO_LARGE,
    MAX_TOKENS_TOO_LARGE,
    MIB,
    PROMPT_TOO_LONG,
    TEXT_TOO_LONG,
    TOO_MANY_GENERATIONS,
    TOO_MANY_TEXTS,
    Rejected,
    check_choices,
    check_generations,
    check_prompt,
    generation_bounds,
)

# Small limits, below what the policy file allows, so every edge fits in a few bytes.
POLICY = ServingPolicy.model_construct(**{**ServingPolicy().model_dump(), "max_body_bytes": 200, "max_texts": 3, "max_text_chars": 10})


def request(body: bytes, content_length: str | None = "auto", chunk: int = 64) -> tuple[Request, list[int]]:
    """A Starlette request whose body arrives in chunks; the list counts the chunks the reader pulled."""
    pulled = []
    parts = [body[i : i + chunk] for i in range(0, len(body), chunk)] or [b""]
    headers = (
        [] if content_length is None else [(b"content-length", str(len(body) if content_length == "auto" else content_length).encode())]
    )

    async def receive():
        i = len(pulled)
        pulled.append(i)
        return {"type": "http.request", "body": parts[i] if i < len(parts) else b"", "more_body": i + 1 < len(parts)}

    return Request({"type": "http", "method": "POST", "path": "/v1/classify", "headers": headers}, receive), pulled


def read(body, **kw) -> ClassifyRequest:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return asyncio.run(read_classify(request(raw, **kw)[0], POLICY))


def rejected(body, **kw) -> Rejected:
    with pytest.raises(Rejected) as e:
        read(body, **kw)
    return e.value


def test_a_request_within_every_limit_is_read():
    got = read({"texts": ["a" * 10, "b", "c"], "adapter": "3"})
    assert got.texts == ["a" * 10, "b", "c"] and got.adapter == "3"


def test_the_body_is_refused_on_its_declared_length_before_a_byte_is_read():
    req, pulled = request(json.dumps({"texts": ["x"]}).encode(), content_length="201")
    with pytest.raises(Rejected) as e:
        asyncio.run(read_classify(req, POLICY))
    assert (e.value.status, e.value.reason, e.value.limit, e.value.value) == (413, BODY_TOO_LARGE, "serving.max_body_bytes", 200)
    assert str(e.value) == "the request body of 201 bytes is larger than serving.max_body_bytes (200 bytes)"
    assert pulled == []
    assert read({"texts": ["x"]}, content_length="200").texts == ["x"]  # at the limit: read


def test_a_body_without_a_length_is_cut_off_while_it_streams():
    body = json.dumps({"texts": ["x" * 9] * 30}).encode()
    req, pulled = request(body, content_length=None, chunk=50)
    with pytest.raises(Rejected) as e:
        asyncio.run(read_classify(req, POLICY))
    assert (e.value.status, e.value.reason) == (413, BODY_TOO_LARGE)
    assert str(e.value) == "the request body is larger than serving.max_body_bytes (200 bytes)"
    assert len(pulled) == 5  # 250 bytes > 200: it stopped at the fifth chunk, never read the rest
    exact = b'{"texts": ["' + b"a" * 10 + b'"]}'
    assert read(exact + b" " * (200 - len(exact)), content_length=None).texts == ["a" * 10]  # 200 bytes exactly


def test_a_length_that_is_not_a_number_is_a_bad_request():
    r = rejected({"texts": ["x"]}, content_length="12abc")
    assert (r.status, r.reason, str(r)) == (400, BAD_REQUEST, "Content-Length is not a number of bytes")
    assert rejected({"texts": ["x"]}, content_length="-1").status == 400


def test_texts_and_characters_are_counted_before_the_request_is_parsed():
    r = rejected({"texts": ["a", "b", "c", "d"]})
    assert (r.status, r.reason, r.limit, r.value) == (422, TOO_MANY_TEXTS, "serving.max_texts", 3)
    assert str(r) == "4 texts in one request, more than serving.max_texts (3)"
    r = rejected({"texts": ["ok", "a" * 11]})
    assert (r.status, r.reason, r.limit, r.value) == (422, TEXT_TOO_LONG, "serving.max_text_chars", 10)
    assert str(r) == "text 1 has 11 characters, more than serving.max_text_chars (10)"
    # Counted on the raw JSON, so a long text is refused even beside a field the model would refuse anyway.
    assert rejected({"texts": ["a" * 11], "unknown": 1}).reason == TEXT_TOO_LONG


@pytest.mark.parametrize(
    "body, why",
    [
        (b"not json", "the request body is not JSON"),
        (b"[" * 90 + b"]" * 90, "not a classify request"),
        ({"texts": []}, "not a classify request: texts"),
        ({"texts": ["x"], "extra": 1}, "not a classify request: extra"),
        ({"texts": [1]}, "not a classify request: texts.0"),
        ({"adapter": "1"}, "not a classify request: texts"),
        (b'{"texts": ["\\ud800"]}', "text 0 is not valid Unicode"),
    ],
)
def test_anything_but_a_classify_request_is_a_bad_request(body, why):
    r = rejected(body)
    assert (r.status, r.reason) == (422, BAD_REQUEST) and str(r).startswith(why), str(r)
    assert r.limit is None and r.value is None


def test_the_answer_names_the_limit_and_its_value():
    r = rejected({"texts": ["a"] * 4})
    assert json.loads(r.response().body) == {"error": str(r), "reason": TOO_MANY_TEXTS, "limit": "serving.max_texts", "value": 3}
    assert r.response().status_code == 422
    plain = rejected(b"nope")
    assert json.loads(plain.response().body) == {"error": str(plain), "reason": BAD_REQUEST}


# A generation's bounds (the OpenAI API of a causal LM), each at and one past its value: small limits, a context of 100
# tokens and 100 bytes of KV cache per token, well within 0.05 MiB except where the KV cache's own bound is tested.
LM_POLICY = ServingPolicy.model_construct(
    **{
        **ServingPolicy().model_dump(),
        "max_prompt_tokens": 50,
        "max_completion_tokens": 40,
        "default_max_tokens": 30,
        "max_kv_cache_mb": 0.05,
        "max_generations": 2,
        "retry_after_s": 7,
    }
)
CONTEXT, KV_PER_TOKEN = 100, 100


def bounds_rejected(prompt: int, max_tokens: int | None, context: int = CONTEXT, kv_per_token: int = KV_PER_TOKEN) -> Rejected:
    with pytest.raises(Rejected) as e:
        generation_bounds(LM_POLICY, prompt, max_tokens, context, kv_per_token)
    return e.value


def test_a_prompt_is_bounded_by_the_policy_at_its_value():
    assert generation_bounds(LM_POLICY, 50, 10, CONTEXT, KV_PER_TOKEN) == (10, 60 * KV_PER_TOKEN)
    r = bounds_rejected(51, 10)
    assert (r.status, r.reason, r.param, r.code) == (400, PROMPT_TOO_LONG, "messages", "context_length_exceeded")
    assert "51 tokens, more than serving.max_prompt_tokens (50)" in str(r)


def test_max_tokens_is_bounded_by_the_policy_at_its_value():
    assert generation_bounds(LM_POLICY, 5, 40, CONTEXT, KV_PER_TOKEN)[0] == 40
    r = bounds_rejected(5, 41)
    assert (r.status, r.reason, r.param) == (400, MAX_TOKENS_TOO_LARGE, "max_tokens")
    assert "max_tokens 41 is more than serving.max_completion_tokens (40)" in str(r)


def test_without_max_tokens_a_generation_gets_the_default_or_what_the_context_leaves():
    assert generation_bounds(LM_POLICY, 10, None, CONTEXT, KV_PER_TOKEN)[0] == 30  # the default
    assert generation_bounds(LM_POLICY, 10, None, 25, KV_PER_TOKEN)[0] == 15  # what the context leaves
    assert generation_bounds(LM_POLICY, 10, None, 11, KV_PER_TOKEN)[0] == 1


def test_without_max_tokens_the_default_is_cut_to_what_the_kv_cache_bound_leaves_too():
    holds = int(0.05 * MIB) // 2000  # tokens of context 0.05 MiB holds at 2000 bytes a token: 26
    assert generation_bounds(LM_POLICY, 10, None, CONTEXT, 2000) == (holds - 10, holds * 2000)  # not 30, which would be 413
    assert generation_bounds(LM_POLICY, holds - 1, None, CONTEXT, 2000)[0] == 1
    r = bounds_rejected(holds, None, kv_per_token=2000)  # the prompt alone fills the bound
    assert (r.status, r.reason, r.param) == (413, KV_CACHE_TOO_LARGE, "messages") and "send a shorter prompt" in str(r)
    with pytest.raises(Rejected) as e:  # a text completion's prompt is named by its own field
        generation_bounds(LM_POLICY, 51, None, CONTEXT, KV_PER_TOKEN, prompt_param="prompt")
    assert (e.value.param, e.value.code) == ("prompt", "context_length_exceeded")


def test_a_prompt_and_its_tokens_must_fit_the_context_and_are_never_cut():
    assert generation_bounds(LM_POLICY, 50, 40, 90, KV_PER_TOKEN)[0] == 40  # exactly the context
    r = bounds_rejected(50, 40, context=89)
    assert (r.status, r.reason, r.param, r.code) == (400, PROMPT_TOO_LONG, "max_tokens", "context_length_exceeded")
    assert "does not fit the model's context of 89 tokens" in str(r)
    assert bounds_rejected(50, None, context=50).reason == PROMPT_TOO_LONG  # no room for one token


def test_the_kv_cache_a_generation_preallocates_is_bounded_at_its_value():
    fits = int(0.05 * MIB)  # bytes: (prompt + new) x bytes per token at exactly the bound
    assert generation_bounds(LM_POLICY, 10, 10, CONTEXT, fits // 20) == (10, 20 * (fits // 20))
    r = bounds_rejected(10, 10, kv_per_token=fits // 20 + 1)
    assert (r.status, r.reason, r.param) == (413, KV_CACHE_TOO_LARGE, "max_tokens")
    assert "more than serving.max_kv_cache_mb (0.05); ask for fewer max_tokens" in str(r)


def test_generations_at_once_are_bounded_and_the_client_told_when_to_retry():
    check_generations(1, LM_POLICY)
    with pytest.raises(Rejected) as e:
        check_generations(2, LM_POLICY)
    r = e.value
    assert (r.status, r.reason, r.type, r.code, r.headers) == (
        429,
        TOO_MANY_GENERATIONS,
        "rate_limit_error",
        "rate_limit_exceeded",
        {"Retry-After": "7"},
    )
    assert "retry after 7 s" in str(r)


def test_an_empty_prompt_and_more_choices_than_the_policy_allows_are_bad_requests():
    check_prompt([1])
    check_choices(4, ServingPolicy())  # serving.max_choices 4, serving.max_generations 4
    with pytest.raises(Rejected) as e:
        check_prompt([])
    assert (e.value.status, e.value.param) == (400, "prompt")
    for policy, limit in (
        (ServingPolicy(), "serving.max_choices"),
        (ServingPolicy(max_choices=8, max_generations=2), "serving.max_generations"),
    ):
        bound = min(policy.max_choices, policy.max_generations)
        check_choices(bound, policy)
        with pytest.raises(Rejected) as e:
            check_choices(bound + 1, policy)
        assert (e.value.status, e.value.param, e.value.limit, e.value.value) == (400, "n", limit, bound)
        assert limit in str(e.value)
