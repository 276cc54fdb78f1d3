"""The demo's labelled data: support tickets generated reproducibly from a seed.

Four intents share most of their vocabulary; a ticket often mentions a second intent in
passing, and a fixed share of labels is wrong, as in real triage data. So no model can
reach 100% and the gates have real differences to judge.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from modelcd_assets.lib.splits import Example, split_path

LABELS = ("billing", "technical", "shipping", "account")

TOPICS = {
    "billing": {
        "nouns": [
            "invoice",
            "refund",
            "charge",
            "subscription fee",
            "receipt",
            "payment",
            "credit card statement",
            "bill",
            "discount code",
            "tax amount",
        ],
        "verbs": [
            "was charged twice for",
            "never got back my",
            "see a wrong",
            "want to dispute the",
            "cannot find my",
            "was overcharged on the",
        ],
    },
    "technical": {
        "nouns": [
            "app",
            "dashboard",
            "sync feature",
            "export button",
            "mobile client",
            "login page",
            "search bar",
            "notification settings",
            "API",
            "upload form",
        ],
        "verbs": [
            "keeps crashing in the",
            "get an error from the",
            "cannot load the",
            "see a blank screen in the",
            "have a timeout in the",
            "found a bug in the",
        ],
    },
    "shipping": {
        "nouns": ["parcel", "package", "delivery", "order", "courier", "tracking number", "shipment", "box", "return label", "pickup"],
        "verbs": [
            "still waiting for my",
            "received a damaged",
            "need to change the address of my",
            "lost track of my",
            "got the wrong",
            "was never handed my",
        ],
    },
    "account": {
        "nouns": [
            "password",
            "username",
            "profile",
            "email address",
            "two factor code",
            "account",
            "membership",
            "user settings",
            "security question",
            "linked phone",
        ],
        "verbs": [
            "cannot reset my",
            "want to delete my",
            "need to update my",
            "got locked out of my",
            "was not able to verify my",
            "want to merge my",
        ],
    },
}
_OPENERS = ["hi,", "hello team,", "good morning,", "hey,", "dear support,", "", "", "urgent:", "quick question:", "please help,"]
_CLOSERS = [
    "thanks.",
    "please advise.",
    "what should i do?",
    "can you help?",
    "",
    "",
    "regards.",
    "this is frustrating.",
    "thank you in advance.",
    "any update?",
]
_MENTIONS = [
    "i also noticed something odd with the",
    "by the way, what about the",
    "unrelated, but the",
    "my friend mentioned the",
    "separately there is the",
]
# The shifted traffic: a new channel whose messages carry long signatures and product codes.
_SIGNATURES = [
    "sent from my phone. this message and any attachments are confidential and intended only for the named recipient.",
    "ticket forwarded automatically by the partner portal, reference attached below, do not reply to this address.",
    "customer success escalation queue, tier two, please respond within the agreed service window of four hours.",
]


def _ticket(rng: np.random.Generator, label: str, shifted: bool) -> str:
    topic = TOPICS[label]
    parts = [str(rng.choice(_OPENERS)), "i", str(rng.choice(topic["verbs"])), str(rng.choice(topic["nouns"])) + "."]
    if rng.random() < 0.45:
        other = str(rng.choice([x for x in LABELS if x != label]))
        parts += [str(rng.choice(_MENTIONS)), str(rng.choice(TOPICS[other]["nouns"])) + "."]
    parts.append(str(rng.choice(_CLOSERS)))
    if shifted:
        parts.append(f"product sku-{rng.integers(10000, 99999)}-{rng.choice(['eu', 'us', 'apac'])}.")
        parts.append(str(rng.choice(_SIGNATURES)))
    return " ".join(p for p in parts if p)


def generate(n: int, seed: int, label_noise: float = 0.06, shifted: bool = False) -> list[Example]:
    """n tickets; label_noise of them carry a wrong label. shifted draws from the new channel."""
    rng = np.random.default_rng(seed)
    probs = np.array([0.1, 0.6, 0.1, 0.2]) if shifted else np.full(len(LABELS), 1 / len(LABELS))
    out = []
    for _ in range(n):
        label = str(rng.choice(LABELS, p=probs))
        text = _ticket(rng, label, shifted)
        if rng.random() < label_noise:
            label = str(rng.choice([x for x in LABELS if x != label]))
        out.append(Example(text, label))
    return out


SPLITS = {
    # name: (size, seed, shifted)
    "train": (3000, 1, False),
    "evaluation": (2400, 2, False),
    "calibration": (256, 3, False),
    "traffic_current": (1000, 4, False),
    "traffic_shifted": (1000, 5, True),
}


def write_splits(folder: Path) -> dict[str, Path]:
    """Write every split as JSON lines under folder, once; return name -> path."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, (size, seed, shifted) in SPLITS.items():
        path = split_path(folder, name)
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            with open(tmp, "w") as f:
                for ex in generate(size, seed, shifted=shifted):
                    f.write(json.dumps({"text": ex.text, "label": ex.label}) + "\n")
            tmp.rename(path)
        paths[name] = path
    return paths
