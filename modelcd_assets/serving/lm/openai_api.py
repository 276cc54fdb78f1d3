"""The OpenAI API's shapes, as LLM clients send and parse them: chat and text completion requests, their answers and
stream chunks, the error body, and stop sequences cut out of streamed text."""

from __future__ import annotations

import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from modelcd_assets.serving.rejections import (
    Rejected,
    bad_request,
    check_one_choice,
    check_one_prompt,
    not_a_completion_request,
)


class ApiError(Rejected):
    """A rejection answered in the OpenAI error body: {"error": {"message", "type", "param", "code"}}, with its headers."""

    @classmethod
    def of(cls, r: Rejected) -> ApiError:
        if isinstance(r, ApiError):
            return r
        return cls(r.status, r.reason, str(r), r.limit, r.value, param=r.param, code=r.code, type=r.type, headers=r.headers)

    def body(self) -> dict:
        return error_body(str(self), type=self.type, param=self.param, code=self.code)


def error_body(message: str, *, type: str = "server_error", param: str | None = None, code: str | None = None) -> dict:
    """The OpenAI error body; alone, for a generation that failed once it was admitted."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[dict] | None = None

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError(f"only text content parts are served; got a part of type {part.get('type')!r}")
            parts.append(part["text"])
        return "".join(parts)


class _Sampled(BaseModel):
    """What both endpoints take. Unknown fields are ignored, as OpenAI's own server does with fields it does not use."""

    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1, max_length=200)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    n: int = Field(1, ge=1)
    user: str | None = Field(None, max_length=256, description="Who the request is for: a rollout's canary is sticky per user.")

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        stops = [v] if isinstance(v, str) else list(v or [])
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("stop takes up to 4 non-empty sequences")
        return stops

    @property
    def stops(self) -> list[str]:
        return list(self.stop or [])


class ChatRequest(_Sampled):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)

    @property
    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def chat(self) -> list[dict]:
        return [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in self.messages]

    def sampled_text(self) -> str:
        """What the traffic log keeps of it: the last user message."""
        return next((m.text() for m in reversed(self.messages) if m.role == "user"), "")


class CompletionRequest(_Sampled):
    prompt: str | list[str]

    @property
    def limit(self) -> int | None:
        return self.max_tokens

    def text(self) -> str:
        if isinstance(self.prompt, list):
            check_one_prompt(self.prompt)
            return self.prompt[0]
        return self.prompt

    def sampled_text(self) -> str:
        return self.text()


def parse(cls: type[_Sampled], raw) -> _Sampled:
    """The request, or Rejected (400) for anything OpenAI's shapes do not allow or this server does not serve."""
    try:
        body = cls.model_validate(raw)
    except ValidationError as e:
        raise not_a_completion_request(e) from None
    except ValueError as e:
        raise bad_request(str(e)) from None
    check_one_choice(body.n)
    return body


class StopCut:
    """Cuts generated text at the first stop sequence; text that may be the start of one is held back until it is not."""

    def __init__(self, stops: list[str]):
        self.stops, self._held, self.stopped = stops, "", False

    def feed(self, piece: str) -> str:
        """The text that may be sent now."""
        if self.stopped:
            return ""
        text = self._held + piece
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped, self._held = True, ""
            return text[: min(hits)]
        keep = max((k for s in self.stops for k in range(min(len(s) - 1, len(text)), 0, -1) if text.endswith(s[:k])), default=0)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        held, self._held = self._held, ""
        return "" if self.stopped else held


class Answer:
    """The ids, times and shapes of one request's answer, for either endpoint, whole or streamed."""

    def __init__(self, chat: bool, model: str):
        self.chat, self.model = chat, model
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _choice(self, text: str | None, finish: str | None, first: bool = False) -> dict:
        if self.chat:
            delta = ({"role": "assistant"} if first else {}) | ({"content": text} if text is not None else {})
            return {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}

    def chunk(self, text: str | None, finish: str | None = None, usage: dict | None = None, first: bool = False) -> dict:
        out = {
            "id": self.id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [self._choice(text, finish, first)],
        }
        return out | ({"usage": usage} if usage else {})

    def whole(self, text: str, finish: str, usage: dict) -> dict:
        choice = (
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish, "logprobs": None}
            if self.chat
            else {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
        )
        return {
            "id": self.id,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage,
        }


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}
