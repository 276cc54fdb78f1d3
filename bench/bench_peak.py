"""How close the server comes to this CPU's INT8 limit: peak MatMulInteger throughput against what serving achieves.

Run after `make bench-serving`: python bench/bench_peak.py
  1. Peak: one ONNX Runtime MatMulInteger (uint8 x int8 -> int32) at large square shapes, on every core, timed
     repeatedly; the best is the peak, in integer ops/s (2·M·N·K per call).
  2. Work per request: the integer multiply-accumulates of the served artifact (its MatMulInteger and QAttention
     weights, 2·K·N per token each), times the mean token count of the evaluation texts the serving bench sent.
  3. Achieved at concurrency 32: requests/s from bench/results/serving.json times the work per request.
  4. Where the time goes, to say what limits the ratio: the served artifact alone (no HTTP), in the server's length
     buckets of 32 on two one-thread sessions' worth of cores, and ONNX Runtime's per-node profile of it, summed by
     operator type, with the integer ops/s reached inside the integer matrix-multiply kernels themselves.
Writes bench/results/peak.json; the ratio achieved/peak is rendered in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import onnx
from machine import machine
from onnx import TensorProto, helper, numpy_helper

from modelcd_assets.lib.inference.runtime import OnnxModel, feeds_for, is_batch_dependent, session
from modelcd_assets.lib.inference.tokens import BATCH, TextEncoder, buckets
from modelcd_assets.lib.operations.settings import apply_local_defaults
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.splits import read_split, split_path

RESULTS = Path(__file__).parent / "results"
SIZES = (1024, 2048, 3072)


def peak_int_ops_per_s(size: int, seconds: float = 3.0) -> float:
    """Best integer ops/s of one size x size x size MatMulInteger on all cores."""
    rng = np.random.default_rng(0)
    b = numpy_helper.from_array(rng.integers(-127, 128, (size, size), dtype=np.int8), "B")
    node = helper.make_node("MatMulInteger", ["A", "B"], ["Y"])
    graph = helper.make_graph(
        [node],
        "peak",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [size, size])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [size, size])],
        initializer=[b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "peak.onnx"
        onnx.save(model, str(path))
        sess = session(path, threads=os.cpu_count())
        a = rng.integers(0, 256, (size, size), dtype=np.uint8)
        sess.run(["Y"], {"A": a})
        best, end = float("inf"), time.perf_counter() + seconds
        while time.perf_counter() < end:
            t = time.perf_counter()
            sess.run(["Y"], {"A": a})
            best = min(best, time.perf_counter() - t)
    return 2 * size**3 / best


def int_macs_per_token(artifact: Path) -> tuple[int, dict[str, int]]:
    """Integer multiply-accumulates per token of an INT8 graph, K x N per quantized weight matrix.

    Dynamic INT8 holds them in MatMulInteger and QAttention nodes; static QDQ in MatMul nodes whose weight comes
    from a DequantizeLinear of an int8 initializer (ONNX Runtime fuses those into integer kernels).
    """
    model = onnx.load(str(artifact))
    inits = {i.name: i for i in model.graph.initializer}
    dequantized = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}

    def int8_matrix(name: str) -> tuple[int, int] | None:
        init = inits.get(dequantized.get(name, name))
        if init is None or len(init.dims) != 2 or init.data_type not in (TensorProto.INT8, TensorProto.UINT8):
            return None
        return int(init.dims[0]), int(init.dims[1])

    total, counts = 0, {}
    for node in model.graph.node:
        if node.op_type in ("MatMulInteger", "QAttention", "MatMul") and len(node.input) > 1:
            shape = int8_matrix(node.input[1])
            if shape is not None:
                total += shape[0] * shape[1]
                counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return total, counts


# Kernels that run the quantized weights' integer products (static QDQ MatMuls are fused into these by ORT).
INTEGER_MATMUL_OPS = ("MatMulInteger", "QLinearMatMul", "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "QAttention", "QGemm")


def model_alone_items_per_s(artifact: Path, feeds: dict, seconds: float = 6.0) -> float:
    """Items/s of the artifact without HTTP: two threads, each running every length bucket of 32 on its own one-thread
    session view (the server's shape: one intra-op thread per call, two calls at once)."""
    model = OnnxModel(artifact, threads=1)
    batches = [feeds_for(model.session, b) for _, b in buckets(feeds, model.batch(BATCH))]
    done = [0, 0]

    def work(i: int, end: float) -> None:
        while time.perf_counter() < end:
            for b in batches:
                model.session.run(["logits"], b)
            done[i] += len(feeds["attention_mask"])

    for b in batches:
        model.session.run(["logits"], b)
    start = time.perf_counter()
    threads = [threading.Thread(target=work, args=(i, start + seconds)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.perf_counter() - start)


def profile_by_op(artifact: Path, feeds: dict, tmp: Path) -> dict[str, float]:
    """Seconds spent in each operator type over one pass of feeds, run as served, from ORT's node profile (one thread)."""
    sess = session(artifact, threads=1, profile_prefix=str(tmp / "profile"))
    model_batches = [feeds_for(sess, b) for _, b in buckets(feeds, 1 if is_batch_dependent(artifact) else BATCH)]
    for b in model_batches:
        sess.run(["logits"], b)
    events = json.loads(Path(sess.end_profiling()).read_text())
    by_op: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            op = e.get("args", {}).get("op_name", "?")
            by_op[op] = by_op.get(op, 0.0) + e["dur"] / 1e6
    return dict(sorted(by_op.items(), key=lambda kv: -kv[1]))


def main() -> int:
    env = apply_local_defaults()
    serving_file = RESULTS / "serving.json"
    if not serving_file.is_file():
        print("bench/results/serving.json is missing; run 'make bench-serving' first", file=sys.stderr)
        return 2
    serving = json.loads(serving_file.read_text())
    name, version = serving["model"].split(" v")
    record = CandidateRecord.of(Path(env["MODELCD_HOME"]), CandidateRef(name, version))
    artifact = record.chosen_int8()
    macs, counts = int_macs_per_token(artifact)
    texts = [e.text for e in read_split(split_path(Path(env["MODELCD_DATA"]), "evaluation"))]
    mean_tokens = float(np.mean(TextEncoder(record.build.merged).lengths(texts)))
    ops_per_request = 2 * macs * mean_tokens
    peaks = {str(n): peak_int_ops_per_s(n) for n in SIZES}
    peak = max(peaks.values())
    achieved = serving["medians"]["modelcd"]["32"]["requests_per_s"] * ops_per_request
    encoder = TextEncoder(record.build.merged)
    feeds = encoder.encode(texts[:512])
    alone = model_alone_items_per_s(artifact, feeds)
    with tempfile.TemporaryDirectory() as tmp:
        by_op = profile_by_op(artifact, feeds, Path(tmp))
    in_kernels = sum(v for k, v in by_op.items() if k in INTEGER_MATMUL_OPS)
    kernel_ops = 2 * macs * float(feeds["attention_mask"].sum())  # every real token's integer products, one pass
    where = {
        "model_alone_items_per_s": alone,
        "model_alone_int_ops_per_s": alone * ops_per_request,
        "model_alone_over_peak": alone * ops_per_request / peak,
        "profile_seconds_by_op": by_op,
        "profile_total_seconds": sum(by_op.values()),
        "integer_matmul_share_of_time": in_kernels / sum(by_op.values()),
        "integer_matmul_kernels_int_ops_per_s_one_thread": kernel_ops / in_kernels if in_kernels else 0.0,
        "peak_per_core_int_ops_per_s": peak / os.cpu_count(),
    }
    result = {
        "machine": machine(),
        "model": serving["model"],
        "variant": record.quantization()["chosen"],
        "artifact_sha256": record.quantization()["artifact_sha256"],
        "peak_int_ops_per_s": peak,
        "peak_by_size": peaks,
        "int_macs_per_token": macs,
        "int_ops_by_op": counts,
        "mean_tokens_per_request": mean_tokens,
        "int_ops_per_request": ops_per_request,
        "requests_per_s_at_32": serving["medians"]["modelcd"]["32"]["requests_per_s"],
        "achieved_int_ops_per_s": achieved,
        "achieved_over_peak": achieved / peak,
        "target": 0.4,
        "where_time_goes": where,
    }
    (RESULTS / "peak.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"peak MatMulInteger on {result['machine']['cpu']}: {peak / 1e9:.1f} GOPS"
        f" ({', '.join(f'{k}: {v / 1e9:.1f}' for k, v in peaks.items())})"
    )
    print(
        f"served model: {macs / 1e6:.2f} M integer MACs per token ({counts}), {mean_tokens:.1f} tokens per request -> "
        f"{ops_per_request / 1e6:.1f} M integer ops per request"
    )
    print(
        f"achieved at concurrency 32: {result['requests_per_s_at_32']:.0f} req/s -> {achieved / 1e9:.2f} GOPS = {achieved / peak:.1%} of"
        " peak (target >= 40%)"
    )
    print(
        f"the model alone, no HTTP: {alone:.0f} items/s = {where['model_alone_over_peak']:.1%} of peak; integer matmul kernels take"
        f" {where['integer_matmul_share_of_time']:.0%} of its time and run at"
        f" {where['integer_matmul_kernels_int_ops_per_s_one_thread'] / 1e9:.1f} GOPS on one thread (peak per core"
        f" {where['peak_per_core_int_ops_per_s'] / 1e9:.1f}); time by op: " + ", ".join(f"{k} {v:.2f}s" for k, v in list(by_op.items())[:8])
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
