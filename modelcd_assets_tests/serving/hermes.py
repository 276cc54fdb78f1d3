"""A chat template that renders tools as Hermes' <tool_call> blocks, for the tiny test LM, and a function to call."""

from __future__ import annotations

# A Hermes-style template of our own (the form of Hermes 2 Pro's and Qwen2.5's), in the tiny model's ChatML; short, to
# leave room in the tiny model's context (256 tokens, about one a character of JSON) for a call.
HERMES_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n{% if messages[0].role == 'system' %}{{ messages[0].content }}\n{% endif %}"
    "<tools>{% for tool in tools %}\n{{ tool.function.name }}: {{ tool.function.parameters | tojson }}{% endfor %}\n</tools><|im_end|>\n"
    "{%- elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{%- elif message.role == 'assistant' %}<|im_start|>assistant{% if message.content %}\n{{ message.content }}{% endif %}"
    "{%- for call in message.tool_calls %}"
    '\n<tool_call>\n{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}\n</tool_call>'
    "{%- endfor %}<|im_end|>\n"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    "\n<tool_response>\n{{ message.content }}\n</tool_response>"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
ROUTE = {
    "type": "function",
    "function": {
        "name": "route",
        "parameters": {
            "type": "object",
            "properties": {"team": {"enum": ["billing", "bugs"]}},
            "required": ["team"],
            "additionalProperties": False,
        },
    },
}
