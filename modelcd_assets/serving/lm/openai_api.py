"""The OpenAI API's shapes, as LLM clients send and parse them: chat and text completion requests, their answers and
stream chunks, logprobs and tool calls, the error body, and stop sequences cut out of streamed text.

Every field of OpenAI's Chat Completions and Completions requests is either honoured or refused with 400 naming it;
a field OpenAI does not define is refused too, by name. Nothing is accepted and left unused."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from modelcd_assets.lib.causal_lm.decoder import Chosen, Sampling
from modelcd_assets.lib.causal_lm.tool_calls import CLOSE, HERMES, call_grammar, read_calls
from modelcd_assets.serving.rejections import UNSUPPORTED, Rejected, bad_request, not_a_completion_request

MAX_TOP_LOGPROBS = 20  # Chat Completions' top_logprobs
MAX_COMPLETION_LOGPROBS = 5  # Completions' logprobs
# Compact JSON unless the schema's own "x-guidance" says otherwise: llguidance's default lets a small model spend its
# tokens on whitespace between the keys (measured on the tiny test LM: 40 tokens of spaces after "{").
COMPACT_JSON = {"whitespace_flexible": False}


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


# Fields of OpenAI's requests that this server refuses unless they hold their "off" value, each with why.
_CHAT_NOT_SERVED = {
    "audio": ("audio output", (None,)),
    "modalities": ("output other than text", (None, ["text"])),
    "prediction": ("predicted outputs", (None,)),
    "reasoning_effort": ("reasoning effort: the base is not a reasoning model", (None,)),
    "verbosity": ("verbosity: the base is not a reasoning model", (None,)),
    "web_search_options": ("web search", (None,)),
    "functions": ("the deprecated functions field; send tools", (None,)),
    "function_call": ("the deprecated function_call field; send tool_choice", (None,)),
    "store": ("stored completions", (None, False)),
    "metadata": ("metadata, which OpenAI keeps only for stored completions", (None,)),
    "service_tier": ("service tiers other than the one tier it has (auto, default)", (None, "auto", "default")),
    "prompt_cache_key": ("prompt cache keys: it keeps no prompt cache to route by", (None,)),
    "safety_identifier": ("safety identifiers: it runs no abuse monitoring to report to; name the end user in `user`", (None,)),
}
_COMPLETION_NOT_SERVED = {
    "suffix": ("fill-in-the-middle: the base was not trained for it", (None, "")),
}


def _refuse_not_served(raw, not_served: dict):
    """raw without the fields not served that hold their "off" value (which asks for what leaving them out does);
    Rejected (400) naming the first that holds another."""
    if not isinstance(raw, dict):
        return raw
    for name, (what, off) in not_served.items():
        if name in raw and raw[name] not in off:
            raise Rejected(400, UNSUPPORTED, f"{name}: this server does not serve {what}", param=name)
    return {k: v for k, v in raw.items() if k not in not_served}


class _Strict(BaseModel):
    """Unknown keys refused, and no value coerced: "yes" is not a boolean nor "5" a number, as OpenAI's own server holds."""

    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(_Strict):
    include_usage: bool = False
    include_obfuscation: bool = False  # OpenAI's padding of stream events against side channels; none is added here

    @field_validator("include_obfuscation")
    @classmethod
    def _no_obfuscation(cls, v):
        if v:
            raise ValueError("this server adds no obfuscation padding to stream events")
        return v


class FunctionCall(_Strict):
    name: str
    arguments: str


class ToolCall(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict] | None = None
    name: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The content as the chat template renders it: an assistant turn that refused, by its refusal."""
        if self.content is None:
            return self.refusal or ""
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if part.get("type") not in ("text", "refusal") or not isinstance(part.get(part["type"]), str):
                raise ValueError(f"only text content parts are served; got a part of type {part.get('type')!r}")
            if extra := sorted(set(part) - {"type", part["type"]}):
                raise ValueError(f"a {part['type']} content part holds {part['type']!r} alone; {extra[0]!r} is not served")
            parts.append(part[part["type"]])
        return "".join(parts)


class FunctionDef(_Strict):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict | None = None
    strict: bool | None = None  # every call is constrained to the parameters' schema, strict or not

    def schema(self) -> dict:
        # A function defined without parameters takes none (OpenAI's "empty parameter list").
        return self.parameters if self.parameters is not None else {"type": "object", "properties": {}, "additionalProperties": False}


class Tool(_Strict):
    type: Literal["function"]
    function: FunctionDef


class NamedTool(_Strict):
    type: Literal["function"]
    function: dict

    @field_validator("function")
    @classmethod
    def _named(cls, v):
        if set(v) != {"name"} or not isinstance(v["name"], str):
            raise ValueError('a named tool_choice is {"type": "function", "function": {"name": NAME}}')
        return v


class JsonSchemaFormat(_Strict):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    schema_: dict | None = Field(None, alias="schema")
    strict: bool | None = None  # the answer is constrained to the schema, strict or not


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self):
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise bad_request('json_schema is given with type "json_schema", and only then', "response_format.json_schema")
        return self


def _compact(schema: dict, param: str) -> dict:
    """schema with llguidance's compact JSON, unless the schema's own x-guidance (an object of llguidance's options, in the
    request's field param) says otherwise."""
    own = schema.get("x-guidance", {})
    if not isinstance(own, dict):
        raise bad_request(f"{param}: a schema's x-guidance is an object of llguidance's options; got {type(own).__name__}", param)
    return schema | {"x-guidance": COMPACT_JSON | own}


def _guided_json(schema: dict, param: str) -> tuple[str, str]:
    """llguidance's JSON-schema grammar of schema, compact unless the schema's own x-guidance says otherwise."""
    return "json_schema", json.dumps(_compact(schema, param))


class _Sampled(_Strict):
    """What both endpoints take."""

    not_served: ClassVar[dict] = {}  # fields refused unless they hold their "off" value: name -> (what, off values)

    @model_validator(mode="before")
    @classmethod
    def _not_served(cls, raw):
        return _refuse_not_served(raw, cls.not_served)

    model: str = Field(min_length=1, max_length=200)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1, le=128)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    user: str | None = Field(None, max_length=256, description="Who the request is for: a rollout's canary is sticky per user.")

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        stops = [v] if isinstance(v, str) else list(v or [])
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("stop takes up to 4 non-empty sequences")
        return stops

    @field_validator("logit_bias")
    @classmethod
    def _biases(cls, v):
        for token, bias in (v or {}).items():
            if not (token.isascii() and token.isdigit()) or len(token) > 10:  # ten digits hold any vocabulary's ids
                raise ValueError(f"logit_bias maps token ids to biases; {token[:24]!r} is not a token id")
            if not -100 <= bias <= 100:
                raise ValueError(f"logit_bias of token {token} is {bias:g}; a bias is from -100 to 100")
        return v

    @model_validator(mode="after")
    def _stream_options_with_stream(self):
        if self.stream_options is not None and not self.stream:
            raise bad_request("stream_options is only allowed when stream is true", "stream_options")
        return self

    @property
    def stops(self) -> list[str]:
        return list(self.stop or [])

    @property
    def choices(self) -> int:
        return self.n or 1

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def guidance(self) -> tuple[str, str] | None:
        return None

    def sampling(self, vocab_size: int, min_new_tokens: int = 0) -> Sampling:
        """How each token is chosen; Rejected (400) for a logit_bias token outside the model's vocabulary."""
        bias = tuple(sorted((int(t), float(b)) for t, b in (self.logit_bias or {}).items()))
        for token, _ in bias:
            if token >= vocab_size:
                raise bad_request(f"logit_bias names token {token}; the model's vocabulary has {vocab_size} tokens", "logit_bias")
        return Sampling(
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            seed=self.seed,
            min_new_tokens=min_new_tokens,
            logit_bias=bias,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
            guidance=self.guidance(),
            top_logprobs=self.logprobs_top(),
        )


class ChatRequest(_Sampled):
    not_served = _CHAT_NOT_SERVED
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedTool | None = None
    parallel_tool_calls: bool | None = None  # false: an answer holds at most one call
    _tool_form: str | None = PrivateAttr(None)  # how this base's chat template renders tools (chat() sets it)

    @model_validator(mode="after")
    def _consistent(self):
        if self.top_logprobs is not None and not self.logprobs:
            raise bad_request("top_logprobs needs logprobs: true", "top_logprobs")
        if self.tool_choice is not None and not self.tools:
            raise bad_request("tool_choice is given without tools", "tool_choice")
        if self.tools and self.response_format is not None and self.response_format.type != "text":
            raise bad_request(
                "response_format and tools together: an answer is either a tool call or JSON in the format, not both", "response_format"
            )
        names = [t.function.name for t in self.tools or []]
        if len(set(names)) != len(names):
            raise bad_request("tools name the same function twice", "tools")
        if isinstance(self.tool_choice, NamedTool) and self.tool_choice.function["name"] not in names:
            raise bad_request(f"tool_choice names the function {self.tool_choice.function['name']!r}, which is not in tools", "tool_choice")
        return self

    @property
    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def tool_form(self) -> str | None:
        """How this base's chat template renders tools (lib/causal_lm/tool_calls.tool_form), once chat() has read it."""
        return self._tool_form

    @property
    def stops(self) -> list[str]:
        """The stop sequences; with tool_choice "auto" and parallel_tool_calls false, the answer also ends where its first
        Hermes call does."""
        one_call = self._tool_form == HERMES and self.tools and self.tool_choice in (None, "auto") and self.parallel_tool_calls is False
        return list(self.stop or []) + ([CLOSE] if one_call else [])

    def reads_calls(self) -> bool:
        """Whether the answer is read for tool calls: a constrained call, or, where the template renders Hermes' calls,
        any answer with tools that tool_choice "none" does not keep to text."""
        if not self.tools or self.tool_choice == "none":
            return False
        return self.calls_tool() is not None or self._tool_form == HERMES

    def logprobs_top(self) -> int | None:
        """None: no logprobs; else how many alternatives each token's logprobs list (sampling() reads it, as it reads
        CompletionRequest's)."""
        return (self.top_logprobs or 0) if self.logprobs else None

    def calls_tool(self) -> str | None:
        """ "required", or the function tool_choice names, when the answer is a tool call; None otherwise."""
        if not self.tools or self.tool_choice in (None, "none", "auto"):
            return None
        return "required" if self.tool_choice == "required" else self.tool_choice.function["name"]

    def guidance(self) -> tuple[str, str] | None:
        call = self.calls_tool()
        if call is not None:
            named = [t for t in self.tools if call in ("required", t.function.name)]
            calls = [
                {
                    "type": "object",
                    "properties": {"name": {"const": t.function.name}, "arguments": t.function.schema()},
                    "required": ["name", "arguments"],
                    "additionalProperties": False,
                }
                for t in named
            ]
            if self._tool_form == HERMES:  # one <tool_call> block, as the template asks for it
                return call_grammar(_compact(calls[0] if len(calls) == 1 else {"anyOf": calls}, "tools"))
            if call == "required":
                return _guided_json({"anyOf": calls}, "tools")
            return _guided_json(named[0].function.schema(), "tools")
        fmt = self.response_format
        if fmt is None or fmt.type == "text":
            return None
        if fmt.type == "json_object":
            return _guided_json({"type": "object"}, "response_format")
        return _guided_json(fmt.json_schema.schema_ if fmt.json_schema.schema_ is not None else {}, "response_format.json_schema.schema")

    def guidance_param(self) -> str:
        return "tools" if self.calls_tool() else "response_format"

    def chat(self, form: str | None) -> tuple[list[dict], list[dict] | None]:
        """The messages, and the tools to hand to the chat template (None: none), as the template takes them; Rejected
        (400) for what this base's template cannot render. form is how it renders tools (tool_calls.tool_form).

        Where it renders Hermes' <tool_call> blocks, the template gets the tools, the assistant turns' calls and the tool
        turns' results, and the answer is read for calls. Elsewhere a call's functions are described to the model in the
        system message, as llama.cpp does for a template without tools, and the answer is constrained to a call that fits
        them (guidance())."""
        self._tool_form = form
        if form == HERMES:
            self._check_tool_turns()
        else:
            why = (
                "this base's chat template does not render tools"
                if form is None
                else "this base's chat template renders tools in a form modelcd does not read (it reads Hermes' <tool_call> blocks)"
            )
            for i, m in enumerate(self.messages):
                if m.role == "tool" or m.tool_calls:
                    raise bad_request(
                        f"messages[{i}]: tool calls and tool results cannot be sent: {why}; send them as text", f"messages[{i}]"
                    )
            if self.tools and self.tool_choice in (None, "auto"):
                raise bad_request(
                    f'tool_choice "auto" (the default with tools) lets the model choose between text and a call, and {why}: name a '
                    'function in tool_choice, or send "required" or "none"',
                    "tool_choice",
                )
        if self.tools and self.tool_choice in (None, "auto"):
            for i, t in enumerate(self.tools):
                if t.function.strict:
                    raise bad_request(
                        f'tools[{i}].function.strict: a call the model makes under tool_choice "auto" is not constrained to '
                        'its parameters; name the function in tool_choice, or send "required", to have it fit them',
                        f"tools[{i}].function.strict",
                    )
        for i, m in enumerate(self.messages):
            if m.name is not None:
                raise bad_request(
                    f"messages[{i}].name: this base's chat template does not render participants' names", f"messages[{i}].name"
                )
            if m.refusal is not None and (m.role != "assistant" or m.content is not None):
                raise bad_request(
                    f"messages[{i}].refusal: only an assistant turn without content carries a refusal (it is rendered as the "
                    "turn's text); send the content or the refusal",
                    f"messages[{i}].refusal",
                )
            if m.content is None and m.refusal is None and not m.tool_calls:
                raise bad_request(f"messages[{i}].content: a {m.role} turn needs its content", f"messages[{i}].content")
            if m.tool_call_id is not None and m.role != "tool":
                raise bad_request(f"messages[{i}].tool_call_id: only a tool turn (role tool) answers a call", f"messages[{i}].tool_call_id")
        tools = None
        if form == HERMES:
            chat = [self._turn(m) for m in self.messages]
            tools = [t.model_dump(exclude_none=True) for t in self.tools] if self.tools else None
        else:
            chat = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in self.messages]
            if self.tools:
                chat = _with_system(chat, self._tools_text())
        fmt = self.response_format
        if fmt is not None and fmt.json_schema is not None and fmt.json_schema.description:
            # what the format is for, shown to the model as OpenAI shows it ("used by the model to determine how to respond")
            chat = _with_system(chat, f"Answer in JSON ({fmt.json_schema.name}): {fmt.json_schema.description}")
        return chat, tools

    def _check_tool_turns(self) -> None:
        """Rejected (400) for calls and results a template cannot render faithfully: calls made by a turn other than the
        assistant's, arguments that are not a JSON object, and a tool turn that answers no call of the assistant turn
        before it (OpenAI's own rule)."""
        answerable: set[str] = set()  # the calls of the last assistant turn, which the tool turns after it answer
        for i, m in enumerate(self.messages):
            if m.tool_calls and m.role != "assistant":
                raise bad_request(f"messages[{i}].tool_calls: only an assistant turn makes calls", f"messages[{i}].tool_calls")
            for j, c in enumerate(m.tool_calls or []):
                try:
                    arguments = json.loads(c.function.arguments)
                except ValueError:
                    arguments = None
                if not isinstance(arguments, dict):
                    param = f"messages[{i}].tool_calls[{j}].function.arguments"
                    raise bad_request(f"{param}: a call's arguments are a JSON object in a string", param)
            if m.role == "tool":
                if m.tool_call_id not in answerable:
                    raise bad_request(
                        f"messages[{i}].tool_call_id: a tool turn answers a call of the assistant turn before it, by its id; "
                        f"{m.tool_call_id!r} is none of {sorted(answerable)}",
                        f"messages[{i}].tool_call_id",
                    )
            elif m.role == "assistant":
                answerable = {c.id for c in m.tool_calls or []}
            else:
                answerable = set()

    @staticmethod
    def _turn(m: Message) -> dict:
        """A message as a template that renders tools takes it: calls' arguments as objects, a tool turn with its call's id."""
        turn = {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
        if m.tool_calls:
            turn["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": json.loads(c.function.arguments)}}
                for c in m.tool_calls
            ]
        if m.role == "tool":
            turn["tool_call_id"] = m.tool_call_id
        return turn

    def _tools_text(self) -> str:
        tools = json.dumps([t.function.model_dump(exclude_none=True) for t in self.tools], separators=(",", ":"))
        call = self.calls_tool()
        if call is None:
            how = "Answer in text."
        elif call == "required":
            how = 'Call one: JSON {"name","arguments"}.'
        else:
            how = f"Call {call}: JSON arguments."
        return f"Functions: {tools}\n{how}"

    def sampled_text(self) -> str:
        """What the traffic log keeps of it: the last user message."""
        return next((m.text() for m in reversed(self.messages) if m.role == "user"), "")


def _with_system(chat: list[dict], text: str) -> list[dict]:
    """chat with text at the end of its system message (one is put first where it has none)."""
    if chat[0]["role"] == "system":
        return [chat[0] | {"content": f"{chat[0]['content']}\n\n{text}"}, *chat[1:]]
    return [{"role": "system", "content": text}, *chat]


class CompletionRequest(_Sampled):
    not_served = _COMPLETION_NOT_SERVED
    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool | None = None
    logprobs: int | None = Field(None, ge=0, le=MAX_COMPLETION_LOGPROBS)
    best_of: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _consistent(self):
        if self.best_of is not None and self.best_of != self.choices:
            raise bad_request(
                f"best_of {self.best_of} with n {self.choices}: choosing the best of more candidates than are returned is not served; "
                "leave best_of out or set it to n",
                "best_of",
            )
        if self.echo and self.logprobs is not None:
            raise bad_request("echo with logprobs (the prompt's own log-probabilities) is not served; ask for one of them", "echo")
        if isinstance(self.prompt, list) and not self.prompt:
            raise bad_request("prompt is an empty list", "prompt")
        return self

    @property
    def limit(self) -> int | None:
        return self.max_tokens

    def prompts(self) -> list[str | list[int]]:
        """Each prompt: a text, or token ids."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if all(isinstance(x, int) for x in p):
            return [list(p)]
        return list(p)

    def logprobs_top(self) -> int | None:
        return self.logprobs

    def sampled_text(self) -> str:
        first = self.prompts()[0]
        return first if isinstance(first, str) else ""


def parse(cls: type[_Sampled], raw) -> _Sampled:
    """The request, or Rejected (400) for anything OpenAI's shapes do not allow or this server does not serve."""
    try:
        return cls.model_validate(raw)
    except ValidationError as e:
        raise not_a_completion_request(e) from None
    except ValueError as e:
        raise bad_request(str(e)) from None


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


class Logprobs:
    """A choice's logprobs in the shape of its endpoint, built piece by piece: Chat Completions' {"content": [...],
    "refusal": null}, or Completions' {"tokens", "token_logprobs", "top_logprobs", "text_offset"}."""

    def __init__(self, chat: bool, token_text, offset: int = 0):
        self.chat, self.token_text, self.offset = chat, token_text, offset

    def _entry(self, token: int, logprob: float) -> dict:
        text = self.token_text(token)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    def of(self, steps: list[Chosen]) -> dict:
        """The logprobs of steps (Completions' text offsets count on from the last steps')."""
        if self.chat:
            return {
                "content": [self._entry(c.token, c.logprob) | {"top_logprobs": [self._entry(t, lp) for t, lp in c.top]} for c in steps],
                "refusal": None,
            }
        out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for c in steps:
            piece = self.token_text(c.token)
            out["tokens"].append(piece)
            out["token_logprobs"].append(c.logprob)
            out["top_logprobs"].append({self.token_text(t): lp for t, lp in c.top} | {piece: c.logprob})
            out["text_offset"].append(self.offset)
            self.offset += len(piece)
        return out


class Answer:
    """The ids, times and shapes of one request's answer, for either endpoint, whole or streamed, with any number of choices."""

    def __init__(self, chat: bool, model: str, fingerprint: str):
        self.chat, self.model, self.fingerprint = chat, model, fingerprint
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _head(self, streamed: bool) -> dict:
        kind = ("chat.completion.chunk" if streamed else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "system_fingerprint": self.fingerprint}

    def chunk(
        self,
        index: int,
        text: str | None,
        finish: str | None = None,
        first: bool = False,
        logprobs: dict | None = None,
        tool_calls: list[dict] | None = None,
        usage: bool = False,
    ) -> dict:
        """One stream event of choice index; usage: the stream carries usage (include_usage), null on every event but the last."""
        if self.chat:
            delta = {"role": "assistant", "content": "", "refusal": None} if first else {}
            delta |= {"content": text} if text is not None else {}
            delta |= {"tool_calls": tool_calls} if tool_calls else {}
            choice = {"index": index, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
        else:
            choice = {"index": index, "text": text or "", "finish_reason": finish, "logprobs": logprobs}
        return self._head(True) | {"choices": [choice]} | ({"usage": None} if usage else {})

    def usage_chunk(self, usage: dict) -> dict:
        """The last event of a stream with include_usage: no choices, the request's usage."""
        return self._head(True) | {"choices": [], "usage": usage}

    def choice(self, index: int, text: str | None, finish: str, logprobs: dict | None, tool_calls: list[dict] | None = None) -> dict:
        if self.chat:
            message = {"role": "assistant", "content": text, "refusal": None} | ({"tool_calls": tool_calls} if tool_calls else {})
            return {"index": index, "message": message, "finish_reason": finish, "logprobs": logprobs}
        return {"index": index, "text": text, "finish_reason": finish, "logprobs": logprobs}

    def whole(self, choices: list[dict], usage: dict) -> dict:
        return self._head(False) | {"choices": choices, "usage": usage}


def tool_calls(request: ChatRequest, text: str) -> tuple[str | None, list[dict]] | None:
    """(the text before the calls, or None; the calls in OpenAI's shape) of a finished answer that holds tool calls; None
    when it holds none, or was cut before a call was whole."""
    if request.tool_form == HERMES:
        read = read_calls(text, {t.function.name for t in request.tools})
        return None if read is None else (read[0], [_call(name, arguments) for name, arguments in read[1]])
    call = request.calls_tool()
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if call == "required":
        if not isinstance(value, dict) or not {"name", "arguments"} <= set(value):
            return None
        name, arguments = value["name"], value["arguments"]
    else:
        name, arguments = call, value
    return None, [_call(name, arguments)]


def _call(name: str, arguments) -> dict:
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def fingerprint(content_hash: str, artifact_sha256: str) -> str:
    """OpenAI's system_fingerprint, "the backend configuration the model runs with": the version's registered files and
    the base build that answered. Answers with equal fingerprints came from the same bytes."""
    return "fp_" + hashlib.sha256(f"{content_hash}:{artifact_sha256}".encode()).hexdigest()[:16]


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}
