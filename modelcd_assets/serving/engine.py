"""A base model held in memory once, and classification under a chosen adapter."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from modelcd_assets.lib.model_io import labels_of, load_classifier, load_tokenizer
from modelcd_assets.lib.tokens import tokenize, truncation_length
from modelcd_assets.serving.lora import LoraAdapter, bound, install

class Engine:
    """One loaded classifier; adapters are installed into it without copying its weights."""

    def __init__(self, model_dir: Path, key: str):
        self.model_dir, self.key = Path(model_dir), key
        self.model = load_classifier(self.model_dir)
        self.tokenizer = load_tokenizer(self.model_dir)
        self.labels = labels_of(self.model_dir)
        self.max_length = truncation_length(self.model_dir)
        # A fast tokenizer raises "Already borrowed" when two threads call it at once.
        self._tokenizer_lock = threading.Lock()

    def install(self, adapter: LoraAdapter) -> None:
        """Make adapter servable on this engine; callers serialize installs (ServingPool loads one at a time)."""
        install(self.model, adapter)

    def logits(self, texts: list[str], adapter: LoraAdapter | None) -> np.ndarray:
        """FP32 logits of texts, every row computed under the same adapter."""
        with self._tokenizer_lock:
            enc = tokenize(self.tokenizer, texts, self.max_length, "pt")
        with torch.inference_mode(), bound(adapter):
            return self.model(**enc).logits.float().numpy()


@dataclass(frozen=True)
class Served:
    """What one request is served by: a registry version on an engine, with its adapter if it is one."""

    model: str
    version: str
    content_hash: str
    engine: Engine
    adapter: LoraAdapter | None

    @property
    def adapter_label(self) -> str:
        """The Prometheus label for this adapter: its short content hash, or 'none' for a full model."""
        return self.adapter.content_hash[:12] if self.adapter is not None else "none"

    def logits(self, texts: list[str]) -> np.ndarray:
        return self.engine.logits(texts, self.adapter)
