"""How a chat becomes the token ids every causal-LM gate scores: the prompt in the model's chat template, then the reply
up to and including the end-of-sequence token. The trainer (transformers' tokenizer) and the gates (ONNX Runtime GenAI's)
render the same template from the same tokenizer.json, so both see the same ids (a test checks it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from modelcd_assets.lib.errors import BadCandidate

Encode = Callable[[list[dict], bool], list[int]]  # (messages, add_generation_prompt) -> ids


@dataclass(frozen=True)
class Chat:
    """One exchange: a system prompt, the user's message and the reply a good model gives."""

    system: str
    user: str
    reply: str

    def messages(self, with_reply: bool = False) -> list[dict]:
        out = ([{"role": "system", "content": self.system}] if self.system else []) + [{"role": "user", "content": self.user}]
        return out + [{"role": "assistant", "content": self.reply}] if with_reply else out


def chat_ids(encode: Encode, chat: Chat, eos_ids: Sequence[int]) -> tuple[list[int], int]:
    """The chat's ids (prompt, reply, EOS) and where the reply starts."""
    prompt = list(encode(chat.messages(), True))
    full = list(encode(chat.messages(with_reply=True), False))
    if full[: len(prompt)] != prompt:
        raise BadCandidate("the chat template renders the prompt differently with the reply appended, so replies cannot be scored "
                           "after their prompt; use a template whose generation prompt is a prefix of the full chat")
    reply = full[len(prompt):]
    end = next((i for i, t in enumerate(reply) if t in eos_ids), None)
    if end is None:
        raise BadCandidate(f"the chat template ends an assistant turn with none of the EOS ids {list(eos_ids)}: generation would never stop")
    return prompt + reply[: end + 1], len(prompt)
