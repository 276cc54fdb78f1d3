"""The causal-LM demo's data: support tickets from the ticket generator with the reply a support assistant should give.

The reply depends on the ticket's intent and on the thing it names, so an adapter has something real to learn; the
same seeds give the same chats. Each chat is a user ticket and an assistant reply, rendered in the model's chat template
where it is used (lib/causal_lm/chats.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from modelcd_assets.lib.causal_lm.chats import Chat, chat_split, write_chats
from modelcd_assets.lib.demo.tickets import TOPICS, generate
from modelcd_assets.lib.splits import split_path

SYSTEM = "You are a support assistant. Answer the ticket in one or two sentences."
_REPLIES = {
    "billing": [
        "sorry about the trouble with your {thing}. we have opened a billing review and will refund any wrong charge within five days.",
        "thanks for flagging the {thing}. our billing team will correct it and email you a new receipt today.",
    ],
    "technical": [
        "sorry that the {thing} is failing. please update the app to the latest version and send us a screenshot if it happens again.",
        "thanks for the report about the {thing}. our engineers are looking into it, and clearing the cache usually helps meanwhile.",
    ],
    "shipping": [
        "sorry about your {thing}. we have contacted the courier and will send you an update with tracking details within a day.",
        "thanks for telling us about the {thing}. a replacement is on its way, and you will get the new tracking number by email.",
    ],
    "account": [
        "we can help with your {thing}. please use the reset link we just emailed you, it is valid for one hour.",
        "thanks for reaching out about your {thing}. for your security we sent a verification code to your email address.",
    ],
}


def _thing(ticket: str, intent: str) -> str:
    nouns = [n for n in TOPICS[intent]["nouns"] if n in ticket]
    return max(nouns, key=len) if nouns else "request"


def chats(n: int, seed: int, shifted: bool = False) -> list[Chat]:
    """n ticket-and-reply chats; the label noise of the triage data is left out (a reply answers the ticket's intent)."""
    rng = np.random.default_rng(seed + 1000)
    out = []
    for ex in generate(n, seed, label_noise=0.0, shifted=shifted):
        template = _REPLIES[ex.label][int(rng.integers(len(_REPLIES[ex.label])))]
        out.append(Chat(SYSTEM, ex.text, template.format(thing=_thing(ex.text, ex.label))))
    return out


def corpus(chat_list: list[Chat]) -> list[str]:
    """The texts a tokenizer for these chats is trained on."""
    return [SYSTEM] + [c.user for c in chat_list] + [c.reply for c in chat_list]


CHAT_SPLITS = {
    # name: (size, seed, shifted); seeds are the ticket splits' (lib/demo/tickets.SPLITS), so the chats answer those tickets
    "train": (600, 1, False),
    "evaluation": (200, 2, False),
    "traffic_current": (200, 4, False),
    "traffic_shifted": (200, 5, True),
}


def write_chat_splits(folder: Path) -> dict[str, Path]:
    """Write every chat split as JSON lines under folder (chats_NAME.jsonl), once; return name -> path."""
    paths = {}
    for name, (size, seed, shifted) in CHAT_SPLITS.items():
        path = split_path(Path(folder), chat_split(name))
        if not path.exists():
            write_chats(path, chats(size, seed, shifted=shifted))
        paths[name] = path
    return paths
