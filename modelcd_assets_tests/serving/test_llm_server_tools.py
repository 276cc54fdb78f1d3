"""Tools over HTTP, spoken to by the official `openai` client, on a base whose chat template renders Hermes' <tool_call>
blocks: the tiny pre-trained Llama with that template, its adapter gated and served by `modelcd serve`. A named call is
constrained to one block and answered as tool_calls; "auto" is the gated greedy answer with the tools in the template; a
conversation holding a call and its result is rendered; a tool turn that answers no call is refused by name."""

from __future__ import annotations

import json
import shutil

import jsonschema
import openai
import pytest

from modelcd_assets.launch import PROMOTED, run_gate
from modelcd_assets.lib.causal_lm.decoder import Decoder
from modelcd_assets.lib.causal_lm.tool_calls import HERMES
from modelcd_assets.serving.lm.openai_api import ChatRequest, parse
from modelcd_assets_tests.conftest import module_state_fixtures
from modelcd_assets_tests.serving.conftest import gated_decoder, openai_client, ready_server
from modelcd_assets_tests.serving.hermes import HERMES_TEMPLATE, ROUTE
from modelcd_assets_tests.tiny_lm import TINY_LM_POLICY

pytestmark = pytest.mark.slow
MODEL = "tiny-tools"
POLICY = TINY_LM_POLICY + "serving:\n  poll_seconds: 0.5\n  max_prompt_tokens: 230\n"
ASK = [{"role": "user", "content": "refund please"}]
NAMED = {"type": "function", "function": {"name": "route"}}

env, instance = module_state_fixtures("llm-tools", {MODEL: POLICY})


@pytest.fixture(scope="module")
def version(env, instance, tiny_lm, tmp_path_factory):
    """The tiny base with the Hermes template registered as the adapter's base (its chats render as ChatML's do, so the
    adapter trained on the ChatML base fits it), and the adapter gated onto it."""
    base = tmp_path_factory.mktemp("hermes-base") / "base"
    shutil.copytree(tiny_lm.base, base)
    (base / "chat_template.jinja").write_text(HERMES_TEMPLATE)
    config = json.loads((base / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)  # the template is chat_template.jinja's
    (base / "tokenizer_config.json").write_text(json.dumps(config))
    env.registry.register(base, "tiny-lm-base", role="base")
    ref = env.registry.register(tiny_lm.adapter, MODEL)
    run = run_gate(ref, instance=instance)
    assert run.outcome == PROMOTED, (run.outcome, run.error)
    return ref


@pytest.fixture(scope="module")
def server(env, version, tmp_path_factory):
    with ready_server(env, tmp_path_factory.mktemp("llm-tools-server") / "server.log", version.version, model=MODEL) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai_client(server)


@pytest.fixture(scope="module")
def reference(env, version) -> Decoder:
    """The gated build with the gated adapter, run directly."""
    return gated_decoder(env, version, "gated")


def test_a_named_call_comes_back_as_tool_calls_whole_and_streamed(client, reference):
    assert reference.tool_form == HERMES  # the gated build kept the base's template
    ask = {"model": MODEL, "messages": ASK, "max_tokens": 80, "temperature": 0, "tools": [ROUTE], "tool_choice": NAMED}
    done = client.chat.completions.create(**ask)
    (call,) = done.choices[0].message.tool_calls
    assert done.choices[0].finish_reason == "tool_calls" and done.choices[0].message.content is None
    assert call.function.name == "route" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), ROUTE["function"]["parameters"])
    streamed = list(client.chat.completions.create(**ask, stream=True))
    deltas = [t for c in streamed if c.choices and c.choices[0].delta.tool_calls for t in c.choices[0].delta.tool_calls]
    assert [(t.index, t.function.name, t.function.arguments) for t in deltas] == [(0, "route", call.function.arguments)]
    assert not any(c.choices and c.choices[0].delta.content for c in streamed) and streamed[-1].choices[0].finish_reason == "tool_calls"


def test_auto_is_the_gated_greedy_answer_with_the_tools_in_the_template(client, reference):
    ask = {"model": MODEL, "messages": ASK, "max_tokens": 30, "temperature": 0, "tools": [ROUTE]}
    done = client.chat.completions.create(**ask)
    request = parse(ChatRequest, ask)
    messages, tools = request.chat(reference.tool_form)
    prompt = reference.encode_chat(messages, tools=tools)
    expected = reference.generate(prompt, 30, "gated")
    assert done.usage.prompt_tokens == len(prompt) and "route" in reference.decode(prompt)
    assert done.choices[0].message.content == reference.decode(expected.tokens) and done.choices[0].message.tool_calls is None
    streamed = list(client.chat.completions.create(**ask, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == done.choices[0].message.content


def test_a_call_and_its_result_are_rendered_and_a_result_that_answers_no_call_is_refused(client, reference):
    called = ASK + [
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "route", "arguments": '{"team": "billing"}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "routed"},
    ]
    # (without the tools described again: the tiny model's context holds the conversation or the tools, not both)
    done = client.chat.completions.create(model=MODEL, messages=called, max_tokens=8, temperature=0)
    messages, _ = parse(ChatRequest, {"model": MODEL, "messages": called}).chat(reference.tool_form)
    prompt = reference.encode_chat(messages)
    assert done.usage.prompt_tokens == len(prompt) and "<tool_response>\nrouted\n</tool_response>" in reference.decode(prompt)
    assert done.choices[0].message.content == reference.decode(reference.generate(prompt, 8, "gated").tokens)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=called[:2] + [called[2] | {"tool_call_id": "c9"}], max_tokens=8)
    assert e.value.body["param"] == "messages[2].tool_call_id" and "'c9' is none of ['c1']" in e.value.body["message"]
