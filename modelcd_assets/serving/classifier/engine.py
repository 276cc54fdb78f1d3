"""A version's gated INT8 artifact on ONNX Runtime, and classification on it: the bytes the gates judged, fed as the gates fed them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from modelcd_assets.lib.classifier.config import labels_of
from modelcd_assets.lib.inference.runtime import OnnxModel
from modelcd_assets.lib.inference.tokens import BATCH, TextEncoder


class Engine:
    """One InferenceSession over one artifact, with the tokenizer and labels of the model it was built from."""

    def __init__(
        self, artifact: Path, model_dir: Path, threads: int = 1, batch_dependent: bool | None = None, artifact_bytes: bytes | None = None
    ):
        self.artifact = Path(artifact)
        self.model = OnnxModel(self.artifact, threads=threads, batch_dependent=batch_dependent, model_bytes=artifact_bytes)
        self.encoder = TextEncoder(model_dir)
        self.labels = labels_of(model_dir)

    @property
    def batch_dependent(self) -> bool:
        return self.model.batch_dependent

    def logits(self, texts: list[str], max_batch: int = BATCH) -> np.ndarray:
        """Logits of texts in length buckets of max_batch (one text per call for a batch-dependent model); sessions take concurrent
        calls."""
        return self.model.logits(self.encoder.encode(texts), max_batch)


@dataclass(frozen=True, eq=False)
class Served:
    """What one request is served by: a registry version and the gated artifact of it that is loaded."""

    model: str
    version: str
    content_hash: str  # the registered version's files (the adapter, or the full model)
    artifact_sha256: str  # the INT8 model the gates judged, verified at load
    variant: str
    engine: Engine

    @property
    def adapter_label(self) -> str:
        """The Prometheus label for this version: its short content hash."""
        return self.content_hash[:12]

    def logits(self, texts: list[str], max_batch: int = BATCH) -> np.ndarray:
        return self.engine.logits(texts, max_batch)
