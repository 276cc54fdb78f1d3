"""Why a batched decode step of the INT8 base with an adapter is not the batch-1 step (bench-llm-serving's batching line).

    python bench/batch_dependence.py BASE_BUILD ADAPTER_FILE

BASE_BUILD is a causal-LM base build folder (its int8/ and fp32/, e.g. under .modelcd/cache/llm_bases/ after
`make demo`), ADAPTER_FILE a gated .onnx_adapter of that base (e.g. .modelcd/cache/builds/*/adapter.onnx_adapter).
In plain ONNX Runtime, no GenAI: each of PROMPTS is prefilled at batch 1 and as 4 and 8 copies, then one decode step is
run, and the next-token logits of the first row are compared (the largest difference over prompts and batches), for
- the INT8 graph as built (MatMulNBits accuracy_level 4: activations quantized to INT8 inside each MatMulNBits),
- the same weights with accuracy_level 1 (MatMulNBits computes in FP32),
- the INT8 graph as built with each LoRA MatMul computed another way (a ReduceSum over the products; or in float64, cast
  back to float32), and what each costs a decode step at batch 1 and 8, and
- the FP32 graph,
each with the adapter's weights and with the zero slots. Then the first two layers' every output, INT8 graph with the
adapter, batch 1 against batch 4: where the two first differ, and by how much.
Writes bench/results/batch_dependence.json; `python bench/render_docs.py` renders it into docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from machine import machine

RESULTS = Path(__file__).parent / "results" / "batch_dependence.json"
# The trace's prompt first; the others are the demo's golden prompts and two more tickets.
PROMPTS = (
    "How do I reset my password?",
    "i was charged twice for my subscription fee. thanks.",
    "hello team, the export button keeps crashing in the app.",
    "my invoice shows the wrong company address, can you fix it before the audit next week?",
)
BATCHES = (4, 8)


def _lora_rewritten(model, how: str) -> None:
    """Each LoRA MatMul x[..., K] @ W[K, N] computed another way:
    - "reduce_sum": ReduceSum(Unsqueeze(x, -1) * W, axis -2), the K products summed by a reduction instead of a GEMM;
    - "float64": x and W cast to float64, multiplied, and the product cast back to float32: whatever order the kernel
      sums in for a number of rows, the sums agree far below float32's rounding, so the float32 result is almost always
      the same (a sum next to a float32 rounding boundary can still round apart)."""
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    if how == "reduce_sum":
        graph.initializer.append(numpy_helper.from_array(np.asarray([-1], np.int64), "lora_rows_axis_last"))
        graph.initializer.append(numpy_helper.from_array(np.asarray([-2], np.int64), "lora_rows_axis_k"))
    nodes = []
    for node in graph.node:
        if node.op_type != "MatMul" or not ("/lora_A/" in node.name or "/lora_B/" in node.name):
            nodes.append(node)
            continue
        (x, w), n = node.input, node.name
        if how == "reduce_sum":
            nodes += [
                helper.make_node("Unsqueeze", [x, "lora_rows_axis_last"], [f"{n}/x_col"], name=f"{n}/Unsqueeze"),
                helper.make_node("Mul", [f"{n}/x_col", w], [f"{n}/products"], name=f"{n}/Mul"),
                helper.make_node("ReduceSum", [f"{n}/products", "lora_rows_axis_k"], list(node.output), name=f"{n}/ReduceSum", keepdims=0),
            ]
        else:
            nodes += [
                helper.make_node("Cast", [x], [f"{n}/x64"], name=f"{n}/CastX", to=TensorProto.DOUBLE),
                helper.make_node("Cast", [w], [f"{n}/w64"], name=f"{n}/CastW", to=TensorProto.DOUBLE),
                helper.make_node("MatMul", [f"{n}/x64", f"{n}/w64"], [f"{n}/y64"], name=f"{n}/MatMul64"),
                helper.make_node("Cast", [f"{n}/y64"], list(node.output), name=f"{n}/CastY", to=TensorProto.FLOAT),
            ]
    graph.ClearField("node")
    graph.node.extend(nodes)


def _graph(folder: Path, out: Path, accuracy_level: int | None = None, outputs: list[str] = (), lora: str | None = None) -> Path:
    """folder's model.onnx, edited, saved as out, whose folder hard-links folder's weights (ONNX Runtime refuses external
    data that resolves outside the model's folder, so a symlink will not do)."""
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    if lora:
        _lora_rewritten(model, lora)
    for node in model.graph.node:
        if accuracy_level is not None and node.op_type == "MatMulNBits":
            for a in node.attribute:
                if a.name == "accuracy_level":
                    a.i = accuracy_level
    for name in outputs:
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    for data in folder.glob("*.onnx.data"):
        link = out.parent / data.name
        if not link.exists():
            os.link(data, link)
    onnx.save(model, str(out))
    return out


class Step:
    """Prefill then one decode step of a GenAI-built decoder graph in an ONNX Runtime session."""

    def __init__(self, path: Path, config: dict, lora: dict[str, np.ndarray] | None):
        options = ort.SessionOptions()
        options.log_severity_level = 3  # the LoRA slots are overridable initializers, which ORT warns about, once each
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        overridable = {i.name for i in self.session.get_overridable_initializers()}
        self.lora = {k: v for k, v in (lora or {}).items() if k in overridable}
        d = config["model"]["decoder"]
        self.layers, self.kv_heads, self.head = int(d["num_hidden_layers"]), int(d["num_key_value_heads"]), int(d["head_size"])
        self.outputs = [o.name for o in self.session.get_outputs()]

    def _feed(self, ids: np.ndarray, past: list[np.ndarray] | None) -> dict:
        b = ids.shape[0]
        past_len = 0 if past is None else past[0].shape[2]
        feed = {
            "input_ids": ids.astype(np.int64 if "int64" in self.inputs["input_ids"].type else np.int32),
            "attention_mask": np.ones(
                (b, past_len + ids.shape[1]), np.int64 if "int64" in self.inputs["attention_mask"].type else np.int32
            ),
        }
        for i in range(self.layers):
            for k, kind in enumerate(("key", "value")):
                feed[f"past_key_values.{i}.{kind}"] = (
                    np.zeros((b, self.kv_heads, 0, self.head), np.float32) if past is None else past[2 * i + k]
                )
        return {**feed, **self.lora}

    def step_ms(self, prompt: list[int], batch: int, reps: int) -> float:
        """Median milliseconds of the decode step after prompt, batch copies of it, over reps runs of the same step."""
        import time

        ids = np.repeat(np.asarray([prompt]), batch, axis=0)
        first = self.session.run(None, self._feed(ids, None))
        feed = self._feed(np.full((batch, 1), int(np.argmax(first[0][0, -1]))), first[1 : 1 + 2 * self.layers])
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            self.session.run(None, feed)
            times.append(1000 * (time.perf_counter() - t))
        return float(np.median(times))

    def decode(self, prompt: list[int], batch: int) -> dict[str, np.ndarray]:
        """Every output of the decode step after prompt, first row; the token decoded is prefill's greedy one."""
        ids = np.repeat(np.asarray([prompt]), batch, axis=0)
        first = self.session.run(None, self._feed(ids, None))
        token = int(np.argmax(first[0][0, -1]))
        past = first[1 : 1 + 2 * self.layers]
        step = self.session.run(None, self._feed(np.full((batch, 1), token), past))
        return {name: value[:1] for name, value in zip(self.outputs, step) if value.dtype == np.float32 and value.size}


def main(build: Path, adapter_file: Path) -> int:
    keep = ort.AdapterFormat.read_adapter(str(adapter_file))  # the arrays below are views of its buffers: kept alive
    weights = {k: np.array(v.numpy(), copy=True) for k, v in keep.get_parameters().items()}
    int8, fp32 = build / "int8", build / "fp32"
    config = json.loads((int8 / "genai_config.json").read_text())
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(int8 / "tokenizer.json"))
    template = (int8 / "chat_template.jinja").read_text()
    prompts = [
        list(
            tokenizer(
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False, chat_template=template
                ),
                add_special_tokens=False,
            )["input_ids"]
        )
        for p in PROMPTS
    ]
    prompt = prompts[0]
    logits = {}
    with tempfile.TemporaryDirectory(dir=build, prefix=".batch-dependence-") as tmp:  # beside int8/, whose hash is attested: not inside it
        tmp = Path(tmp)
        sides = {
            "int8_accuracy_level_4": _graph(int8, tmp / "acc4.onnx", 4),
            "int8_accuracy_level_1": _graph(int8, tmp / "acc1.onnx", 1),
            "int8_accuracy_level_4_lora_reduce_sum": _graph(int8, tmp / "acc4_reduce_sum.onnx", 4, lora="reduce_sum"),
            "int8_accuracy_level_4_lora_float64": _graph(int8, tmp / "acc4_float64.onnx", 4, lora="float64"),
            "fp32": fp32 / "model.onnx",
        }
        for name, path in sides.items():
            for with_adapter in (True, False):
                step = Step(path, config, weights if with_adapter else None)
                logits[f"{name}_{'with' if with_adapter else 'without'}_adapter"] = max(
                    float(np.max(np.abs(step.decode(p, 1)["logits"] - step.decode(p, b)["logits"]))) for p in prompts for b in BATCHES
                )
        # What each way of computing the LoRA product costs: the decode step with the adapter, the sides interleaved, at batch 1 and 8.
        timed = {
            name: Step(sides[name], config, weights)
            for name in ("int8_accuracy_level_4", "int8_accuracy_level_4_lora_reduce_sum", "int8_accuracy_level_4_lora_float64")
        }
        step_ms = {name: {"1": [], "8": []} for name in timed}
        for _ in range(5):
            for name, step in timed.items():
                for batch in (1, 8):
                    step_ms[name][str(batch)].append(step.step_ms(prompt, batch, 20))
        step_ms = {name: {b: float(np.median(v)) for b, v in by.items()} for name, by in step_ms.items()}
        graph = onnx.load(str(int8 / "model.onnx"), load_external_data=False).graph
        traced = [o for n in graph.node if n.name.startswith(("/model/layers.0/", "/model/layers.1/")) for o in n.output if o]
        op_of = {o: n.op_type for n in graph.node for o in n.output}
        step = Step(_graph(int8, tmp / "trace.onnx", None, traced), config, weights)
        one, four = step.decode(prompt, 1), step.decode(prompt, 4)
        trace = [{"output": o, "op": op_of[o], "max_abs_diff": float(np.max(np.abs(one[o] - four[o])))} for o in traced if o in one]
    first = next((t for t in trace if t["max_abs_diff"] > 0), None)
    result = {
        "machine": machine(),
        "build": str(build),
        "adapter_file": str(adapter_file),
        "prompt_tokens": len(prompt),
        "prompts": len(prompts),
        "batches": list(BATCHES),
        "next_token_logits_max_abs_diff_batched_vs_batch1": logits,
        "first_differing_output": first,
        "decode_step_ms_with_adapter": step_ms,
        "trace_layers_0_1": trace,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    for k, v in logits.items():
        print(f"{k:48s} max |Δlogit| batch {' and '.join(map(str, BATCHES))} vs batch 1, {len(prompts)} prompts: {v:.3g}")
    for name, by in step_ms.items():
        print(f"{name:36s} decode step with the adapter: {by['1']:.2f} ms at batch 1, {by['8']:.2f} ms at batch 8")
    if first:
        print(f"first output that differs: {first['output']} ({first['op']}), by {first['max_abs_diff']:.3g}")
    for t in trace:
        if t["op"] == "MatMulNBits":
            print(f"  {t['max_abs_diff']:10.3g}  {t['output']}")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
