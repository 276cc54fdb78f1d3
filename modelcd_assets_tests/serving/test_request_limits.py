"""read_classify on its own: every limit at, and one past, its value, checked before anything parses the texts."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.requests import Request

from modelcd_assets.lib.judging.policy import ServingPolicy
from modelcd_assets.serving.classifier.classify_api import ClassifyRequest, read_classify
from modelcd_assets.serving.rejections import BAD_REQUEST, BODY_TOO_LARGE, TEXT_TOO_LONG, TOO_MANY_TEXTS, Rejected

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
