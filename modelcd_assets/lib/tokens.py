"""Tokenized inputs, cached by tokenizer and text content so every adapter of a base shares them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from modelcd_assets.lib.export import INPUT_NAMES
from modelcd_assets.lib.hashing import file_sha256, text_hash
from modelcd_assets.lib.model_io import load_tokenizer


def tokenizer_hash(model_dir: Path) -> str:
    """Content hash of the tokenizer files of a model folder."""
    parts = [f"{p.name}:{file_sha256(p)}" for p in sorted(Path(model_dir).glob("*")) if p.name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")]
    return text_hash(*parts)


def encode(model_dir: Path, texts: list[str], max_length: int, cache_dir: Path | None = None) -> dict[str, np.ndarray]:
    """int64 input arrays padded to max_length; reused from cache_dir when the same work was done."""
    key = text_hash(tokenizer_hash(model_dir), str(max_length), *texts)
    path = Path(cache_dir) / f"{key}.npz" if cache_dir else None
    if path is not None and path.is_file():
        with np.load(path) as z:
            return {k: z[k] for k in INPUT_NAMES}
    enc = load_tokenizer(model_dir)(texts, padding="max_length", truncation=True, max_length=max_length, return_tensors="np")
    feeds = {k: np.asarray(enc[k], dtype=np.int64) for k in INPUT_NAMES}
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, **feeds)
        tmp.rename(path)
    return feeds
