"""ONNX Runtime sessions and batched inference; providers chosen by what is installed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from modelcd_assets.lib.inference.tokens import BATCH, buckets


def providers() -> list[str]:
    """CUDA first when onnxruntime-gpu is installed and sees a device, then CPU."""
    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


def session(
    model: Path | bytes, threads: int | None = None, provider: str | None = None, profile_prefix: str | None = None
) -> ort.InferenceSession:
    """An inference session over a model file or its bytes; threads=None lets ORT use every core. profile_prefix: write
    ORT's per-node profile there (InferenceSession.end_profiling() returns the file)."""
    opts = ort.SessionOptions()
    if profile_prefix:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    # Idle intra-op threads otherwise spin for a while after each call and steal the cores from the
    # next session: interleaved A/B timings then swing by ±20% instead of ±3% on two cores.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), opts, providers=[provider] if provider else providers())


# Ops whose activation scales are computed per call, over the whole batch: a text's output then depends on what it was
# batched with (measured on MiniLM dynamic INT8: up to 0.29 logits, alone vs in a bucket of 32; static INT8 and FP32: 0.0).
BATCH_DEPENDENT_OPS = frozenset({"DynamicQuantizeLinear", "DynamicQuantizeMatMul", "QAttention", "MatMulIntegerToFloat"})


def is_batch_dependent(model_path: Path) -> bool:
    """Whether the graph computes activation scales per call (dynamic INT8): its outputs then depend on the batch."""
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    return any(n.op_type in BATCH_DEPENDENT_OPS for n in graph.node)


class OnnxModel:
    """An ONNX model opened for inference, run the one way everything in modelcd runs it.

    Gates, probes, benchmarks and the server all call models through this, so a text's output is the same wherever
    and with whatever it is run: a batch-dependent graph takes one text per call. batch_dependent, when the caller
    already knows it (recorded at gating), saves re-reading the graph. model_bytes: the file's bytes, already read and
    verified by the caller, so the session runs exactly what was verified (the file could change after the check).
    """

    def __init__(
        self,
        path: Path,
        threads: int | None = None,
        provider: str | None = None,
        batch_dependent: bool | None = None,
        model_bytes: bytes | None = None,
    ):
        self.path = Path(path)
        self.session = session(model_bytes if model_bytes is not None else self.path, threads=threads, provider=provider)
        self.batch_dependent = is_batch_dependent(self.path) if batch_dependent is None else bool(batch_dependent)

    def batch(self, requested: int) -> int:
        """The most texts one call may take when the caller asks for requested."""
        return 1 if self.batch_dependent else requested

    def logits(self, feeds: dict[str, np.ndarray], batch_size: int = BATCH) -> np.ndarray:
        return logits(self.session, feeds, self.batch(batch_size))


def feeds_for(sess: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Only the inputs this graph takes (an optimized graph may drop token_type_ids)."""
    names = {i.name for i in sess.get_inputs()}
    return {k: v for k, v in feeds.items() if k in names}


def logits(sess: ort.InferenceSession, feeds: dict[str, np.ndarray], batch_size: int = BATCH) -> np.ndarray:
    """Logits for every row of feeds, in length buckets: each batch padded only to its own longest row (tokens.buckets)."""
    out = None
    for rows, batch in buckets(feeds, batch_size):
        y = sess.run(["logits"], feeds_for(sess, batch))[0]
        if out is None:
            out = np.empty((len(feeds["attention_mask"]), y.shape[1]), dtype=np.float32)
        out[rows] = y
    if out is None:
        raise ValueError("no inputs to run")
    return out
