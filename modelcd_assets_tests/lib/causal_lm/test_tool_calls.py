"""Hermes tool calls read from generated text: whole, as they stream, and which templates ask for them."""

from __future__ import annotations

import pytest

from modelcd_assets.lib.causal_lm.tool_calls import HERMES, UNREAD, CallSplit, read_calls, tool_form

FUNCTIONS = {"route", "close"}
CALL = '<tool_call>\n{"name": "route", "arguments": {"team": "billing"}}\n</tool_call>'


def test_which_templates_render_tools_and_in_which_form():
    assert tool_form("{% for m in messages %}{{ m.content }}{% endfor %}") is None
    assert tool_form("{% if tools %}{{ tools | tojson }}{% endif %}") == UNREAD
    assert tool_form("{% if tools %}<tool_call>{{ tools | tojson }}</tool_call>{% endif %}") == HERMES


@pytest.mark.parametrize(
    ("text", "read"),
    [
        (CALL, (None, [("route", {"team": "billing"})])),
        ("Routing it. " + CALL, ("Routing it. ", [("route", {"team": "billing"})])),
        (
            CALL + "\n" + CALL.replace("route", "close").replace('{"team": "billing"}', "{}"),
            (None, [("route", {"team": "billing"}), ("close", {})]),
        ),
        # cut at its stop sequence (</tool_call>), its JSON whole
        ('<tool_call>\n{"name": "close", "arguments": {}}', (None, [("close", {})])),
        ('<tool_call>{"name": "close"}</tool_call>', (None, [("close", {})])),  # no arguments: an empty object
    ],
)
def test_a_finished_answer_that_ends_in_calls_is_read_as_its_text_and_calls(text, read):
    assert read_calls(text, FUNCTIONS) == read


@pytest.mark.parametrize(
    "text",
    [
        "no call here",
        CALL + " and then some words",  # text after the calls
        CALL + " words " + CALL,  # text between them
        CALL.replace("route", "delete"),  # a function it was not given
        CALL.replace('{"team": "billing"}', '"billing"'),  # arguments that are not an object
        '<tool_call>\n{"name": "route", "arguments": {"team": "bil',  # cut before its JSON was whole
        '<tool_call>\n{"name": "route", "arguments": {}, "extra": 1}\n</tool_call>',  # a key a call does not have
        "<tool_call>\n[1, 2]\n</tool_call>",
    ],
)
def test_an_answer_that_is_not_a_clean_list_of_calls_is_text(text):
    assert read_calls(text, FUNCTIONS) is None


def test_text_streams_up_to_where_a_call_may_begin_and_the_rest_is_held():
    split = CallSplit()
    sent = [split.feed(p) for p in ("Routing ", "it. <tool", "_ca", "ll>\n{", '"name": "route"}', "\n</tool_call>")]
    assert sent == ["Routing ", "it. ", "", "", "", ""] and split.calling
    assert split.held() == '<tool_call>\n{"name": "route"}\n</tool_call>'
    # a "<" that does not begin a call is sent once it is known not to
    split = CallSplit()
    assert [split.feed(p) for p in ("a <", "b> <tool", "box")] == ["a ", "<b> ", "<toolbox"] and not split.calling
    assert split.held() == ""
    # held from the start: an answer that is a call alone
    split = CallSplit(calling=True)
    assert [split.feed(p) for p in ("{", "}")] == ["", ""] and split.held() == "{}"
