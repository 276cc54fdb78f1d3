"""A streamed answer's events as OpenAI clients read them, on stand-in generations (no model): a generation that fails
after the stream began is an error event followed by [DONE], and a client's parser sees it as an error."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from modelcd_assets.lib.causal_lm.decoder import Chosen
from modelcd_assets.lib.causal_lm.tool_calls import HERMES
from modelcd_assets.serving.lm.generation import Admitted
from modelcd_assets.serving.lm.handler import Choice, Completion
from modelcd_assets.serving.lm.openai_api import ChatRequest, CompletionRequest, parse


class Tokens:
    """A generation's token stream that yields pieces, then fails (or ends)."""

    def __init__(self, pieces: list[str], fails: BaseException | None):
        self.pieces, self.fails, self.closed = list(pieces), fails, False

    def __aiter__(self):
        return self

    async def __anext__(self):
        await asyncio.sleep(0)
        if self.pieces:
            return Chosen(len(self.pieces), -0.5, ((len(self.pieces), -0.5),)), self.pieces.pop(0)
        if self.fails is not None:
            raise self.fails
        raise StopAsyncIteration

    async def aclose(self):
        self.closed = True


class Account:
    def __init__(self):
        self.made, self.eos, self.failed = 0, 0, None

    @property
    def completion_tokens(self):
        return self.made + self.eos

    def token(self):
        self.made += 1

    def ended_turn(self):
        self.eos += 1

    def non_finite(self):
        pass

    def finish(self, failed):
        self.failed = failed


SERVED = SimpleNamespace(
    model="m", version="3", content_hash="h", artifact_sha256="a", decoder=SimpleNamespace(token_text=lambda t: f"<{t}>")
)


def completion(body: dict, chat: bool, streams: list[Tokens], tool_form: str | None = None) -> tuple[Completion, Account]:
    """A completion of body over streams; a chat's messages read as a template that renders tools in tool_form would."""
    request = parse(ChatRequest if chat else CompletionRequest, body)
    if chat:
        request.chat(tool_form)
    account = Account()
    choices = [Choice(i, [1, 2], Admitted(8, 0), s, account, request.stops) for i, s in enumerate(streams)]
    return Completion(chat, request, SERVED, choices, account), account


def events(body: dict, chat: bool, streams: list[Tokens], tool_form: str | None = None) -> tuple[list[str], Account]:
    answer, account = completion(body, chat, streams, tool_form)

    async def read():
        return [e["data"] async for e in answer._events()]

    return asyncio.run(read()), account


def test_a_generation_that_fails_after_the_stream_began_ends_with_an_error_event_then_done():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    data, account = events(body, True, [Tokens(["a", "b"], RuntimeError("the runtime failed"))])
    assert data[-1] == "[DONE]"
    error = json.loads(data[-2])["error"]
    assert error["message"] == "generation failed: the runtime failed" and error["type"] == "server_error"
    assert "".join(json.loads(d)["choices"][0]["delta"].get("content", "") for d in data[:-2]) == "ab"
    assert account.failed is True


def test_the_openai_client_raises_the_error_event_it_reads():
    import httpx
    import openai

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    data, _ = events(body, True, [Tokens(["a"], RuntimeError("the runtime failed"))])
    sse = "".join(f"data: {d}\r\n\r\n" for d in data).encode()
    transport = httpx.MockTransport(lambda r: httpx.Response(200, content=sse, headers={"content-type": "text/event-stream"}))
    client = openai.OpenAI(base_url="http://modelcd/v1", api_key="x", http_client=httpx.Client(transport=transport), max_retries=0)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
    with pytest.raises(openai.APIError, match="generation failed: the runtime failed"):
        list(stream)


def test_choices_stream_side_by_side_and_usage_comes_last_when_asked():
    body = {"model": "m", "prompt": "hi", "n": 2, "stream": True, "logprobs": 1, "stream_options": {"include_usage": True}}
    data, account = events(body, False, [Tokens(["a", "b"], None), Tokens(["c"], None)])
    chunks = [json.loads(d) for d in data[:-1]]
    assert data[-1] == "[DONE]" and chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 2 + 1 + 2
    assert chunks[-1]["usage"]["prompt_tokens"] == 4  # two prompts of two tokens, each its own choice
    texts = {i: "".join(c["choices"][0]["text"] for c in chunks[:-1] if c["choices"][0]["index"] == i) for i in (0, 1)}
    assert texts == {0: "ab", 1: "c"} and all(c["usage"] is None for c in chunks[:-1])
    finishes = [c["choices"][0]["finish_reason"] for c in chunks[:-1] if c["choices"][0]["finish_reason"]]
    assert finishes == ["stop", "stop"] and account.failed is False
    tokens = [t for c in chunks[:-1] if c["choices"][0]["logprobs"] for t in c["choices"][0]["logprobs"]["tokens"]]
    assert sorted(tokens) == ["<1>", "<1>", "<2>"]


class Endless(Tokens):
    """A generation that makes one token and then waits for more until it is closed."""

    async def __anext__(self):
        if self.pieces:
            return await super().__anext__()
        while not self.closed:
            await asyncio.sleep(0.01)
        raise StopAsyncIteration


class LeavingClient:
    """A request whose client goes away after it has been asked a few times."""

    def __init__(self, after: int):
        self.asked, self.after = 0, after

    async def is_disconnected(self) -> bool:
        self.asked += 1
        return self.asked > self.after


def test_a_client_that_goes_away_before_its_whole_answer_stops_every_choice_and_is_no_error():
    request = parse(ChatRequest, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2})
    account, streams = Account(), [Endless(["a"], None), Endless(["b"], None)]
    choices = [Choice(i, [1, 2], Admitted(8, 0), s, account, request.stops) for i, s in enumerate(streams)]
    completion = Completion(True, request, SERVED, choices, account)
    response = asyncio.run(asyncio.wait_for(completion.whole(LeavingClient(after=3)), 60))  # without the watch: a timeout
    assert response.status_code == 499 and all(s.closed for s in streams)  # both generations stopped
    assert account.failed is False and account.made == 2  # counted with the tokens made, as a stream whose client left


HERMES_CALL = ["Sure", ". <tool", '_call>\n{"name": "route", ', '"arguments": {}}\n</tool_call>']


@pytest.mark.parametrize(
    ("pieces", "content", "call"),
    [
        (HERMES_CALL, "Sure. ", ("route", "{}")),
        (["a <tool_call>", " not JSON"], "a <tool_call> not JSON", None),  # not a call: all of it is text
        (["no call"], "no call", None),
    ],
)
def test_text_before_a_hermes_call_streams_and_the_call_comes_whole_as_the_whole_answer_has_it(pieces, content, call):
    tools = [{"type": "function", "function": {"name": "route"}}]
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools, "logprobs": True}
    data, _ = events(body | {"stream": True}, True, [Tokens(pieces, None)], tool_form=HERMES)
    deltas = [json.loads(d)["choices"][0] for d in data[:-1]]
    calls = [t for d in deltas for t in d["delta"].get("tool_calls") or []]
    streamed_call = (calls[0]["function"]["name"], calls[0]["function"]["arguments"]) if calls else None
    streamed_lp = [t["token"] for d in deltas if d["logprobs"] for t in d["logprobs"]["content"]]
    assert "".join(d["delta"].get("content") or "" for d in deltas) == content and streamed_call == call
    assert len(calls) == (call is not None) and all(c["index"] == 0 and c["id"].startswith("call_") for c in calls)
    # the text up to the call was sent before the call was made
    if call is not None:
        assert [d["delta"].get("content") for d in deltas[1:3]] == ["Sure", ". "]
    whole, _ = completion(body, True, [Tokens(pieces, None)], tool_form=HERMES)
    answer = asyncio.run(whole._whole_choice(whole.choices[0]))
    whole_call = answer["message"].get("tool_calls")
    assert answer["message"]["content"] == (content if content else None)
    assert (whole_call[0]["function"]["name"], whole_call[0]["function"]["arguments"]) == call if call else whole_call is None
    assert answer["finish_reason"] == deltas[-1]["finish_reason"] == ("tool_calls" if call else "stop")
    assert [t["token"] for t in answer["logprobs"]["content"]] == streamed_lp and len(streamed_lp) == len(pieces)
