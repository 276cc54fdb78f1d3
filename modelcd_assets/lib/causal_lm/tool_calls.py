"""Tool calls in the Hermes form, which chat templates that render tools ask their model for (Hermes 2 Pro, Qwen2.5 and
their kin): every call a block `<tool_call>{"name": …, "arguments": {…}}</tool_call>`. Which form a template asks for;
the calls read from a finished answer; the text of an answer that may be sent while it streams; and the grammar that
constrains an answer to one call."""

from __future__ import annotations

import json
import re

OPEN, CLOSE = "<tool_call>", "</tool_call>"
HERMES = "hermes"  # the template renders tools and asks for <tool_call> blocks
UNREAD = "unread"  # the template renders tools, in a form whose calls modelcd does not read
_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)


def tool_form(template: str) -> str | None:
    """HERMES, UNREAD, or None where the chat template does not render tools (it never reads `tools`)."""
    if "tools" not in template:
        return None
    return HERMES if OPEN in template else UNREAD


def read_calls(text: str, functions: set[str]) -> tuple[str | None, list[tuple[str, dict]]] | None:
    """(the text before the first call, or None where there is none; each call's function name and arguments) of a
    finished answer that ends in one or more calls of functions; None where it does not, and the whole answer is text: no
    <tool_call>, a block that is not a JSON object with a name of functions and object arguments, or text between or
    after the blocks. The last block may be unclosed (cut at its stop sequence), if its JSON is whole."""
    start = text.find(OPEN)
    if start < 0:
        return None
    calls, at = [], start
    for block in _BLOCK.finditer(text, start):
        if text[at : block.start()].strip():
            return None
        try:
            value = json.loads(block.group(1))
        except ValueError:
            return None
        if not isinstance(value, dict) or set(value) - {"name", "arguments"} or value.get("name") not in functions:
            return None
        arguments = value.get("arguments", {})
        if not isinstance(arguments, dict):
            return None
        calls.append((value["name"], arguments))
        at = block.end()
    if text[at:].strip():
        return None
    return text[:start] or None, calls


class CallSplit:
    """An answer's text as it streams: sent up to where a call may begin; from <tool_call> on, held until the answer ends
    (then read whole by read_calls). Text that may be the start of <tool_call> is held until it is not. calling: all of it
    is held (an answer that is a call alone)."""

    def __init__(self, calling: bool = False):
        self._held, self.calling = "", calling

    def feed(self, piece: str) -> str:
        """The text that may be sent now."""
        text = self._held + piece
        if self.calling:
            self._held = text
            return ""
        at = text.find(OPEN)
        if at >= 0:
            self.calling, self._held = True, text[at:]
            return text[:at]
        keep = next((k for k in range(min(len(OPEN) - 1, len(text)), 0, -1) if text.endswith(OPEN[:k])), 0)
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep]

    def held(self) -> str:
        """The text held back, once the answer has ended."""
        return self._held


def call_grammar(schema: dict) -> tuple[str, str]:
    """llguidance's Lark grammar (kind, text) of an answer that is one <tool_call> block holding a JSON value of schema."""
    return "lark_grammar", f'start: "{OPEN}\\n" call "\\n{CLOSE}"\ncall: %json {json.dumps(schema)}'
