"""How a chat becomes the token ids every causal-LM gate scores: the prompt in the model's chat template, then the reply
up to and including the end-of-sequence token. The trainer (transformers' tokenizer) and the gates (ONNX Runtime GenAI's)
render the same template from the same tokenizer.json, so both see the same ids (a test checks it)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

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
        raise BadCandidate(
            "the chat template renders the prompt differently with the reply appended, so replies cannot be scored "
            "after their prompt; use a template whose generation prompt is a prefix of the full chat"
        )
    reply = full[len(prompt) :]
    end = next((i for i, t in enumerate(reply) if t in eos_ids), None)
    if end is None:
        raise BadCandidate(
            f"the chat template ends an assistant turn with none of the EOS ids {list(eos_ids)}: generation would never stop"
        )
    return prompt + reply[: end + 1], len(prompt)


# A causal LM's splits sit beside the classifier's in the data folder, as chats: chats_evaluation.jsonl, ...
CHAT_SPLIT_PREFIX = "chats_"


def chat_split(name: str) -> str:
    """The data folder's name of a causal LM's split called name (evaluation, traffic_current, ...)."""
    return name if name.startswith(CHAT_SPLIT_PREFIX) else CHAT_SPLIT_PREFIX + name


def read_chats(path: Path) -> list[Chat]:
    """A JSON-lines file of chats, each {"system", "user", "reply"}."""
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out.append(Chat(str(row.get("system", "")), str(row["user"]), str(row.get("reply", ""))))
        except (ValueError, KeyError, TypeError) as e:
            raise BadCandidate(f'{path}:{n} is not a chat: each line must be a JSON object with "user" (and "system", "reply"): {e}') from e
    return out


def write_chats(path: Path, chats: list[Chat]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(asdict(c)) + "\n" for c in chats))
    tmp.rename(path)
    return path
