"""What a chat request puts before the model, and how its answer is read.

Tools where the base's chat template renders them as Hermes' <tool_call> blocks, on the tiny LM's build with such a
template: the template gets the tools, calls and results; a named or required call is constrained to one block that fits
the function, and read back as tool_calls; "auto" is the gated, unconstrained decoding, read for calls; what such a
template cannot render faithfully is refused by name. A JSON format's description is shown to the model."""

from __future__ import annotations

import json
import shutil

import jsonschema
import pytest

from modelcd_assets.lib.causal_lm.decoder import Decoder
from modelcd_assets.lib.causal_lm.tool_calls import HERMES
from modelcd_assets.serving.lm.openai_api import ChatRequest, parse, tool_calls
from modelcd_assets.serving.rejections import Rejected
from modelcd_assets_tests.serving.hermes import HERMES_TEMPLATE, ROUTE

CLOSE = {"type": "function", "function": {"name": "close"}}  # no parameters: it takes none
ASK = [{"role": "user", "content": "refund please"}]
CALLED = ASK + [
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "route", "arguments": '{"team": "billing"}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "routed"},
    {"role": "user", "content": "thanks"},
]


@pytest.fixture(scope="module")
def decoder(tiny_lm, tmp_path_factory) -> Decoder:
    folder = tmp_path_factory.mktemp("hermes") / "int8"
    shutil.copytree(tiny_lm.build.int8, folder)
    (folder / "chat_template.jinja").write_text(HERMES_TEMPLATE)
    return Decoder(folder)


def request(**fields) -> ChatRequest:
    return parse(ChatRequest, {"model": "m", "messages": ASK, "max_tokens": 80, "temperature": 0} | fields)


def prompt(decoder: Decoder, body: ChatRequest) -> list[int]:
    messages, tools = body.chat(decoder.tool_form)
    return decoder.encode_chat(messages, tools=tools)


def answer(decoder: Decoder, body: ChatRequest) -> str:
    ids = prompt(decoder, body)
    return decoder.decode(
        [c.token for c in decoder.stream(ids, decoder.context_length - len(ids), None, body.sampling(decoder.vocab_size))]
    )


def test_the_template_gets_the_tools_the_calls_and_their_results(decoder):
    assert decoder.tool_form == HERMES
    text = decoder.decode(prompt(decoder, request(messages=CALLED, tools=[ROUTE])))
    assert "route: " + json.dumps(ROUTE["function"]["parameters"]) in text
    assert '<tool_call>\n{"name": "route", "arguments": {"team": "billing"}}\n</tool_call>' in text  # the arguments as an object
    assert "<tool_response>\nrouted\n</tool_response>" in text and text.rstrip().endswith("assistant")


@pytest.mark.parametrize("choice", [{"type": "function", "function": {"name": "route"}}, "required"])
def test_a_named_or_required_call_is_one_block_that_fits_the_function_read_back_as_a_call(decoder, choice):
    body = request(tools=[ROUTE, CLOSE] if choice == "required" else [ROUTE], tool_choice=choice, parallel_tool_calls=False)
    text = answer(decoder, body)  # the prompt first, as the server reads it: the template's form decides the constraint
    sampling = body.sampling(decoder.vocab_size)
    assert sampling.guidance[0] == "lark_grammar"
    decoder.check_guidance(*sampling.guidance)
    assert text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>"), text
    content, (call,) = tool_calls(body, text)
    assert content is None and call["type"] == "function" and call["id"].startswith("call_")
    if call["function"]["name"] == "close":
        assert json.loads(call["function"]["arguments"]) == {}
    else:
        jsonschema.validate(json.loads(call["function"]["arguments"]), ROUTE["function"]["parameters"])


def test_auto_decodes_as_the_gates_judged_and_reads_the_answer_for_calls(decoder):
    body = request(tools=[ROUTE])
    ids = prompt(decoder, body)
    assert body.sampling(decoder.vocab_size).guidance is None and body.reads_calls()  # greedy, unconstrained
    greedy = decoder.generate(ids, 40).tokens
    assert [c.token for c in decoder.stream(ids, 40, None, body.sampling(decoder.vocab_size))] == greedy
    # the tiny model answers in text: no call is read from it
    assert tool_calls(body, decoder.decode(greedy)) is None
    # a call it wrote would be read, after its text
    content, (call,) = tool_calls(body, 'Sure. <tool_call>\n{"name": "route", "arguments": {"team": "bugs"}}\n</tool_call>')
    assert content == "Sure. " and call["function"] == {"name": "route", "arguments": '{"team": "bugs"}'}
    # one call asked for: the answer ends where its first call does
    assert _stops(decoder, parallel_tool_calls=False) == ["</tool_call>"] and _stops(decoder, parallel_tool_calls=False, stop="x") == [
        "x",
        "</tool_call>",
    ]
    assert _stops(decoder) == [] and _stops(decoder, tool_choice="none") == []
    none = request(tools=[ROUTE], tool_choice="none")
    prompt(decoder, none)  # the tools are rendered, and the answer is text
    assert none.reads_calls() is False


def _stops(decoder, **fields) -> list[str]:
    body = request(tools=[ROUTE], **fields)
    prompt(decoder, body)
    return body.stops


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"messages": CALLED[:2] + [{"role": "tool", "tool_call_id": "c9", "content": "x"}]}, "messages[2].tool_call_id"),
        ({"messages": [ASK[0], {"role": "tool", "tool_call_id": "c1", "content": "x"}]}, "messages[1].tool_call_id"),
        ({"messages": [ASK[0], {"role": "tool", "content": "x"}]}, "messages[1].tool_call_id"),
        (
            {"messages": [ASK[0], {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "route", "arguments": "[1]"}}]}]},
            "messages[1].tool_calls[0].function.arguments",
        ),
        (  # llama.cpp's test_malformed_tool_call_args_rejected
            {"messages": [ASK[0], {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "route", "arguments": "{"}}]}]},
            "messages[1].tool_calls[0].function.arguments",
        ),
        ({"messages": [ASK[0] | {"tool_calls": CALLED[1]["tool_calls"]}]}, "messages[0].tool_calls"),
        ({"tools": [ROUTE | {"function": ROUTE["function"] | {"strict": True}}]}, "tools[0].function.strict"),
        ({"messages": [ASK[0] | {"tool_call_id": "c1"}]}, "messages[0].tool_call_id"),
    ],
)
def test_what_the_template_cannot_render_faithfully_is_refused_by_name(decoder, fields, param):
    body = request(**({"tools": [ROUTE]} | fields))
    with pytest.raises(Rejected) as e:
        prompt(decoder, body)
    assert e.value.status == 400 and e.value.param == param, str(e.value)


@pytest.mark.parametrize("system", [[], [{"role": "system", "content": "You route tickets."}]])
def test_a_json_formats_description_is_shown_to_the_model_in_the_system_message(system):
    fmt = {"type": "json_schema", "json_schema": {"name": "routing", "description": "the team to route to", "schema": {"type": "object"}}}
    messages, _ = request(messages=system + ASK, response_format=fmt).chat(None)
    assert messages[0]["role"] == "system" and messages[0]["content"].endswith("Answer in JSON (routing): the team to route to")
    assert messages[0]["content"].startswith(system[0]["content"] if system else "Answer") and messages[1:] == ASK
    plain = fmt | {"json_schema": {"name": "routing", "schema": {"type": "object"}}}
    assert request(messages=system + ASK, response_format=plain).chat(None)[0] == system + ASK


def test_a_template_kept_in_tokenizer_config_is_read_for_its_tools_as_one_in_its_own_file(tiny_lm, tmp_path):
    folder = tmp_path / "int8"
    shutil.copytree(tiny_lm.build.int8, folder)
    (folder / "chat_template.jinja").unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps(config | {"chat_template": HERMES_TEMPLATE}))
    decoder = Decoder(folder)
    assert decoder.tool_form == HERMES
    assert "route: " in decoder.decode(prompt(decoder, request(tools=[ROUTE])))


def test_a_conversation_the_chat_template_refuses_is_a_400_with_the_templates_words(tiny_lm, tmp_path):
    from modelcd_assets.serving.lm.handler import CompletionHandler

    folder = tmp_path / "int8"
    shutil.copytree(tiny_lm.build.int8, folder)
    refusing = "{% if messages[0].role != 'user' %}{{ raise_exception('Conversations start with the user') }}{% endif %}"
    (folder / "chat_template.jinja").write_text(refusing + "{% for m in messages %}{{ m.content }}{% endfor %}")
    decoder = Decoder(folder)
    assert CompletionHandler._prompts(request(), decoder, True)  # a conversation it takes
    with pytest.raises(Rejected) as e:
        CompletionHandler._prompts(request(messages=[{"role": "system", "content": "hi"}] + ASK), decoder, True)
    assert e.value.status == 400 and e.value.param == "messages"
    assert str(e.value) == "the chat template refused the messages: Conversations start with the user", str(e.value)
