"""Input length, tokenization and padding: the one owner of how text becomes model inputs, for the gates and the server alike.

Tokenization runs on the model's tokenizer.json through the `tokenizers` library (what transformers' fast
tokenizers run), so the serving process needs neither transformers nor torch. Inputs are cut at MAX_LENGTH
tokens and padded only to the longest input of their batch; batches group texts of similar length.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from modelcd_assets.lib.errors import BadCandidate
from modelcd_assets.lib.hashing import file_sha256, text_hash

# Inputs are cut at this many tokens (or the model's position limit, if lower) everywhere: the gates judge
# what the server serves, and the I/O contract records it. The demo's tickets are 18 tokens at the median, 31 at most.
MAX_LENGTH = 128
# Texts per batch wherever modelcd runs a model: the gates, the benchmarks and the server (serving.max_batch defaults to it).
BATCH = 32
TOKENIZER_FILE = "tokenizer.json"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")  # the ONNX graph's inputs, in export order


def check_generation_length(prompt_tokens: int, max_new_tokens: int, context_length: int) -> None:
    """The one rule for a causal LM's prompt, in the gates and the server alike (the contract records it as "refused"):
    the prompt and the tokens it may generate must fit the context; a prompt that does not is refused, never cut."""
    if prompt_tokens < 1 or prompt_tokens + max_new_tokens > context_length:
        raise BadCandidate(
            f"a prompt of {prompt_tokens} tokens with up to {max_new_tokens} new tokens does not fit the model's context of "
            f"{context_length} tokens; prompts beyond the context are refused, not truncated: shorten it, or ask for fewer tokens"
        )


def truncation_length(model_dir: Path) -> int:
    """Where inputs to this model are cut: MAX_LENGTH, or the model's position limit when it is lower."""
    positions = json.loads((Path(model_dir) / "config.json").read_text()).get("max_position_embeddings") or MAX_LENGTH
    return min(MAX_LENGTH, int(positions))


def tokenizer_hash(model_dir: Path) -> str:
    """Content hash of the tokenizer files of a model folder."""
    parts = [
        f"{p.name}:{file_sha256(p)}"
        for p in sorted(Path(model_dir).glob("*"))
        if p.name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
    ]
    return text_hash(*parts)


class TextEncoder:
    """A model's tokenizer with modelcd's truncation; immutable after construction, so threads may share it."""

    def __init__(self, model_dir: Path):
        from tokenizers import Tokenizer

        path = Path(model_dir) / TOKENIZER_FILE
        if not path.is_file():
            raise BadCandidate(
                f"{model_dir} has no {TOKENIZER_FILE}; save the model's fast tokenizer with it "
                "(AutoTokenizer.from_pretrained(..., use_fast=True).save_pretrained(folder))"
            )
        self.max_length = truncation_length(model_dir)
        tok = Tokenizer.from_file(str(path))
        pad = tok.padding  # tokenizer.json may pin a fixed length; only its pad token is kept
        self.pad_id = int(pad["pad_id"]) if pad else _pad_id(tok, Path(model_dir))
        tok.no_padding()
        tok.enable_truncation(self.max_length)
        self._tok = tok

    def tokens(self, texts: list[str]) -> list:
        """One encoding per text, cut at max_length, unpadded."""
        return self._tok.encode_batch(list(texts), add_special_tokens=True)

    def lengths(self, texts: list[str]) -> np.ndarray:
        return np.array([len(e.ids) for e in self.tokens(texts)], dtype=np.int64)

    def encode(self, texts: list[str], pad_to: int | None = None) -> dict[str, np.ndarray]:
        """int64 model inputs, padded to the longest text (or to pad_to, for fixed-shape timings only)."""
        if pad_to is not None and pad_to > self.max_length:
            raise ValueError(f"cannot pad to {pad_to} tokens: inputs are cut at {self.max_length}")
        encodings = self.tokens(texts)
        width = pad_to or max((len(e.ids) for e in encodings), default=0)
        feeds = {name: np.zeros((len(encodings), width), dtype=np.int64) for name in INPUT_NAMES}
        feeds["input_ids"][:] = self.pad_id
        for row, e in enumerate(encodings):
            n = min(len(e.ids), width)
            feeds["input_ids"][row, :n] = e.ids[:n]
            feeds["attention_mask"][row, :n] = e.attention_mask[:n]
            feeds["token_type_ids"][row, :n] = e.type_ids[:n]
        return feeds


def _pad_id(tok, model_dir: Path) -> int:
    token = "[PAD]"
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        path = model_dir / name
        if path.is_file():
            value = json.loads(path.read_text()).get("pad_token")
            token = value.get("content", token) if isinstance(value, dict) else (value or token)
            break
    pad_id = tok.token_to_id(token)
    if pad_id is None:
        raise BadCandidate(f"{model_dir}: the tokenizer has no pad token {token!r}; set pad_token in tokenizer_config.json")
    return int(pad_id)


def buckets(feeds: dict[str, np.ndarray], max_batch: int) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """The padding rule: rows sorted by length, cut into batches of max_batch, each trimmed to its own longest row.

    Returns (row indices, inputs) per batch; every row appears in exactly one batch.
    """
    lengths = feeds["attention_mask"].sum(axis=1)
    order = np.argsort(lengths, kind="stable")
    out = []
    for start in range(0, len(order), max_batch):
        rows = order[start : start + max_batch]
        width = max(int(lengths[rows].max()), 1)
        out.append((rows, {k: v[rows, :width] for k, v in feeds.items()}))
    return out


def encode(model_dir: Path, texts: list[str], cache_dir: Path | None = None, pad_to: int | None = None) -> dict[str, np.ndarray]:
    """int64 input arrays as the gates judge them; reused from cache_dir when the same work was done."""
    length = truncation_length(model_dir)
    key = text_hash("tokenizers", tokenizer_hash(model_dir), str(length), str(pad_to), *texts)
    path = Path(cache_dir) / f"{key}.npz" if cache_dir else None
    if path is not None and path.is_file():
        with np.load(path) as z:
            return {k: z[k] for k in INPUT_NAMES}
    feeds = TextEncoder(model_dir).encode(texts, pad_to)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, **feeds)
        tmp.rename(path)
    return feeds
