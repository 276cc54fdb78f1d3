"""ONNX Runtime sessions and batched inference; providers chosen by what is installed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort


def providers() -> list[str]:
    """CUDA first when onnxruntime-gpu is installed and sees a device, then CPU."""
    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


def session(path: Path, threads: int | None = None, provider: str | None = None) -> ort.InferenceSession:
    """An inference session; threads=None lets ORT use every core."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    # Idle intra-op threads otherwise spin for a while after each call and steal the cores from the
    # next session: interleaved A/B timings then swing by ±20% instead of ±3% on two cores.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=[provider] if provider else providers())


def feeds_for(sess: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Only the inputs this graph takes (an optimized graph may drop token_type_ids)."""
    names = {i.name for i in sess.get_inputs()}
    return {k: v for k, v in feeds.items() if k in names}


def logits(sess: ort.InferenceSession, feeds: dict[str, np.ndarray], batch_size: int = 64) -> np.ndarray:
    """Logits for every row of feeds, in batches."""
    feeds = feeds_for(sess, feeds)
    n = len(next(iter(feeds.values())))
    outs = [sess.run(["logits"], {k: v[i : i + batch_size] for k, v in feeds.items()})[0] for i in range(0, n, batch_size)]
    return np.concatenate(outs).astype(np.float32)
