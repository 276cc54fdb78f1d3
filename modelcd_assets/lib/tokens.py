"""Input length and tokenization: the one owner of how text becomes model inputs, for the gates and the server alike."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from modelcd_assets.lib.export import INPUT_NAMES
from modelcd_assets.lib.hashing import file_sha256, text_hash
from modelcd_assets.lib.model_io import load_tokenizer

# Inputs are cut at this many tokens (or the model's position limit, if lower) everywhere: the gates judge
# what the server serves, and the I/O contract records it. The demo's tickets are 18 tokens at the median, 31 at most.
MAX_LENGTH = 128


def truncation_length(model_dir: Path) -> int:
    """Where inputs to this model are cut: MAX_LENGTH, or the model's position limit when it is lower."""
    positions = json.loads((Path(model_dir) / "config.json").read_text()).get("max_position_embeddings") or MAX_LENGTH
    return min(MAX_LENGTH, int(positions))


def tokenizer_hash(model_dir: Path) -> str:
    """Content hash of the tokenizer files of a model folder."""
    parts = [f"{p.name}:{file_sha256(p)}" for p in sorted(Path(model_dir).glob("*")) if p.name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")]
    return text_hash(*parts)


def tokenize(tokenizer, texts: list[str], max_length: int, return_tensors: str, pad_to: int | None = None):
    """The one tokenizer call: truncated at max_length, padded to the longest text (or to pad_to, for fixed-shape timing)."""
    padding = "max_length" if pad_to else "longest"
    return tokenizer(texts, padding=padding, truncation=True, max_length=pad_to or max_length, return_tensors=return_tensors)


def encode(model_dir: Path, texts: list[str], cache_dir: Path | None = None, pad_to: int | None = None) -> dict[str, np.ndarray]:
    """int64 input arrays as the gates judge them; reused from cache_dir when the same work was done."""
    length = truncation_length(model_dir)
    if pad_to is not None and pad_to > length:
        raise ValueError(f"cannot pad to {pad_to} tokens: inputs to {model_dir} are cut at {length}")
    key = text_hash(tokenizer_hash(model_dir), str(length), str(pad_to), *texts)
    path = Path(cache_dir) / f"{key}.npz" if cache_dir else None
    if path is not None and path.is_file():
        with np.load(path) as z:
            return {k: z[k] for k in INPUT_NAMES}
    enc = tokenize(load_tokenizer(model_dir), texts, length, "np", pad_to)
    feeds = {k: np.asarray(enc[k], dtype=np.int64) for k in INPUT_NAMES}
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, **feeds)
        tmp.rename(path)
    return feeds
