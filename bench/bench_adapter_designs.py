"""Two ways to serve many LoRA adapters of one base on ONNX Runtime, measured side by side on the same adapters.

Run after `make demo`: python bench/bench_adapter_designs.py [--adapters 4]
  (a) per version: each adapter merged into the base, exported, fused, dynamic-INT8 quantized: one session each
      (what modelcd serves today);
  (b) shared base: the base exported once with a LoRA branch on every adapted projection whose weights are graph
      inputs with zero defaults, and the classifier head as graph inputs too; dynamic INT8 with the LoRA matmuls left
      out of quantization; each adapter is an `.onnx_adapter` file (onnxruntime.AdapterFormat) activated per run
      (RunOptions.add_active_adapter).
The adapters are the demo's good one and copies of it with every LoRA B and the head scaled by small factors, so
all are plausible and all differ. For each design: time to make one more adapter servable, resident memory per
adapter, items/s on evaluation texts (one text per call, as dynamic INT8 is served), and agreement of (b) with (a).
Writes bench/results/adapter_designs.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from demo_files import demo_files
from machine import machine
from onnx import helper, numpy_helper

from modelcd_assets.lib.classifier.export import export_onnx
from modelcd_assets.lib.classifier.model_io import merge_adapter
from modelcd_assets.lib.inference.quantize import optimize_transformer, quantize_dynamic_int8
from modelcd_assets.lib.inference.runtime import feeds_for, logits, session
from modelcd_assets.lib.inference.tokens import TextEncoder
from modelcd_assets.lib.splits import read_split, split_path

RESULTS = Path(__file__).parent / "results" / "adapter_designs.json"
PREFIX = "base_model.model."


RSS_SCRIPT = """
import json, sys
from pathlib import Path
import numpy as np
import onnxruntime as ort
from modelcd_assets.lib.inference.runtime import session
def rss():
    return next(int(l.split()[1]) for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmRSS")) / 1024
design, paths = sys.argv[1], sys.argv[2:]
held = []
if design == "b":
    held.append(session(Path(paths[0]), threads=1))
    paths = paths[1:]
before = rss()
for p in paths:
    if design == "a":
        held.append(session(Path(p), threads=1))
    else:
        adapter = ort.LoraAdapter()
        adapter.Load(p)
        held.append(adapter)
print(json.dumps((rss() - before) / len(paths)))
"""


def mb_per_adapter(design: str, paths: list[Path]) -> float:
    """Resident MB each adapter adds in a fresh process: a session per adapter (a), or an adapter on one base session (b)."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", RSS_SCRIPT, design, *map(str, paths)], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def scaled_adapters(good: Path, out: Path, n: int) -> list[Path]:
    """The good adapter and n-1 variants: LoRA B and the saved head scaled by 1 + 0.02 k."""
    from safetensors.numpy import load_file, save_file

    folders = []
    for k in range(n):
        d = out / f"adapter{k}"
        shutil.copytree(good, d)
        w = load_file(str(d / "adapter_model.safetensors"))
        save_file(
            {key: v * (1 + 0.02 * k) if ("lora_B" in key or "classifier" in key) else v for key, v in w.items()},
            str(d / "adapter_model.safetensors"),
        )
        folders.append(d)
    return folders


def lora_graph(base_onnx: Path, out: Path, cfg: dict, hidden: int) -> tuple[Path, dict[str, str], list[str]]:
    """The base graph with a LoRA branch on each targeted projection; returns the graph, module -> input prefix, LoRA node names."""
    model = onnx.load(str(base_onnx))
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    r = int(cfg["r"])
    targets = set(cfg["target_modules"])
    added_nodes, lora_nodes, modules = [], [], {}
    for node in list(g.node):
        # TorchScript export names nodes by module scope: /bert/encoder/layer.0/attention/self/query/MatMul
        parts = node.name.strip("/").split("/")
        if node.op_type != "MatMul" or len(parts) < 2 or parts[-2] not in targets:
            continue
        module = ".".join(parts[:-1])
        x, y = node.input[0], node.output[0]
        a_name, b_name = f"lora_A::{module}", f"lora_B::{module}"
        g.input.extend(
            [
                helper.make_tensor_value_info(a_name, onnx.TensorProto.FLOAT, [hidden, r]),
                helper.make_tensor_value_info(b_name, onnx.TensorProto.FLOAT, [r, hidden]),
            ]
        )
        g.initializer.extend(
            [
                numpy_helper.from_array(np.zeros((hidden, r), np.float32), a_name),
                numpy_helper.from_array(np.zeros((r, hidden), np.float32), b_name),
            ]
        )
        base_out = y + "::base"
        node.output[0] = base_out
        n1 = helper.make_node("MatMul", [x, a_name], [y + "::xa"], name=f"{node.name}/lora_A")
        n2 = helper.make_node("MatMul", [y + "::xa", b_name], [y + "::xab"], name=f"{node.name}/lora_B")
        n3 = helper.make_node("Add", [base_out, y + "::xab"], [y], name=f"{node.name}/lora_add")
        added_nodes += [n1, n2, n3]
        lora_nodes += [n1.name, n2.name]
        modules[module] = module
    # The head: its weight and bias become inputs whose defaults are the base's, so an adapter can replace them; it is
    # left out of quantization below.
    for name, init in inits.items():
        if name.startswith("classifier."):
            g.input.append(helper.make_tensor_value_info(name, init.data_type, list(init.dims)))
    g.node.extend(added_nodes)
    # Keep the graph topologically sorted: move each node after its inputs' producers (a stable re-sort).
    produced = {i.name for i in g.input} | {i.name for i in g.initializer} | {""}
    ordered, pending = [], list(g.node)
    while pending:
        rest = []
        for n in pending:
            if all(i in produced for i in n.input):
                ordered.append(n)
                produced.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise RuntimeError(f"cannot order the LoRA graph: {[n.name for n in rest[:3]]}")
        pending = rest
    del g.node[:]
    g.node.extend(ordered)
    onnx.save(model, str(out))
    return out, modules, lora_nodes


def adapter_file(folder: Path, modules: dict[str, str], cfg: dict, head_names: list[str], out: Path) -> Path:
    """One adapter's LoRA weights (scale folded into B, transposed for x @ A^T @ B^T) and head, as an .onnx_adapter file."""
    from safetensors.numpy import load_file

    w = load_file(str(folder / "adapter_model.safetensors"))
    scale = float(cfg["lora_alpha"]) / int(cfg["r"])
    params = {}
    for module in modules:
        key = module.replace("/", ".")
        a = w[f"{PREFIX}{key}.lora_A.weight"]
        b = w[f"{PREFIX}{key}.lora_B.weight"]
        params[f"lora_A::{module}"] = np.ascontiguousarray(a.T.astype(np.float32))
        params[f"lora_B::{module}"] = np.ascontiguousarray((b.T * scale).astype(np.float32))
    for key, v in w.items():
        if key.startswith(PREFIX + "classifier."):  # the head saved whole (modules_to_save), as the graph names it
            name = "classifier." + key.rsplit(".", 1)[-1]
            if name + "_Transposed" in head_names:
                params[name + "_Transposed"] = np.ascontiguousarray(v.T.astype(np.float32))
            elif name in head_names:
                params[name] = v.astype(np.float32)
    fmt = ort.AdapterFormat()
    fmt.set_adapter_version(1)
    fmt.set_model_version(1)
    fmt.set_parameters({k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in params.items()})
    fmt.export_adapter(str(out))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--adapters", type=int, default=4)
    ap.add_argument("--texts", type=int, default=256)
    args = ap.parse_args()
    found = demo_files()
    if found is None:
        return 2
    data, base, good = found.data, found.base, found.adapter
    cfg = json.loads((good / "adapter_config.json").read_text())
    hidden = int(json.loads((base / "config.json").read_text())["hidden_size"])
    texts = [e.text for e in read_split(split_path(data, "evaluation"))][: args.texts]
    result: dict = {"machine": machine(), "adapters": args.adapters, "texts": len(texts)}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        adapters = scaled_adapters(good, tmp / "adapters", args.adapters)
        enc = TextEncoder(base)
        singles = [enc.encode([t]) for t in texts]

        # (a) one merged, fused, dynamic-INT8 session per adapter
        a_build = []
        for k, folder in enumerate(adapters):
            t = time.perf_counter()
            merged = tmp / f"a{k}" / "merged"
            merge_adapter(base, folder, merged)
            export_onnx(merged, tmp / f"a{k}" / "model.onnx")
            optimize_transformer(tmp / f"a{k}" / "model.onnx", tmp / f"a{k}" / "opt.onnx", merged / "config.json")
            quantize_dynamic_int8(tmp / f"a{k}" / "opt.onnx", tmp / f"a{k}" / "int8.onnx")
            session(tmp / f"a{k}" / "int8.onnx", threads=1)
            a_build.append(time.perf_counter() - t)
        a_sessions = [session(tmp / f"a{k}" / "int8.onnx", threads=1) for k in range(len(adapters))]
        a_logits = [np.concatenate([logits(s, f, 1) for f in singles]) for s in a_sessions]
        a_rss = mb_per_adapter("a", [tmp / f"a{k}" / "int8.onnx" for k in range(len(adapters))])

        # (b) one shared base session; adapters as .onnx_adapter files
        t = time.perf_counter()
        export_onnx(base, tmp / "base.onnx")
        graph, modules, lora_nodes = lora_graph(tmp / "base.onnx", tmp / "base_lora.onnx", cfg, hidden)
        fused = optimize_transformer(graph, tmp / "base_lora_opt.onnx", base / "config.json")
        from onnxruntime.quantization import QuantType, quantize_dynamic

        opt = onnx.load(str(tmp / "base_lora_opt.onnx"), load_external_data=False).graph
        overridable = {i.name for i in opt.input} & {i.name for i in opt.initializer}  # LoRA weights and the head
        excluded = sorted({n.name for n in opt.node if n.name in lora_nodes or overridable & set(n.input)})
        # quantize_dynamic first rewrites every Gemm as "<name>_MatMul" + Add, and matches nodes_to_exclude after that.
        excluded += [n.name + "_MatMul" for n in opt.node if n.op_type == "Gemm" and n.name in excluded]
        quantize_dynamic(
            str(tmp / "base_lora_opt.onnx"),
            str(tmp / "base_int8.onnx"),
            weight_type=QuantType.QInt8,
            per_channel=False,
            nodes_to_exclude=excluded,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
        # quantize_dynamic rewrote the head's Gemm as MatMul with a transposed copy of the weight and dropped it from the
        # inputs; make that copy overridable again.
        q = onnx.load(str(tmp / "base_int8.onnx"))
        inputs = {i.name for i in q.graph.input}
        for init in q.graph.initializer:
            if init.name.startswith("classifier.") and init.name not in inputs:
                q.graph.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
        head_names = [i.name for i in q.graph.input if i.name.startswith("classifier.")]
        onnx.save(q, str(tmp / "base_int8.onnx"))
        b_session = session(tmp / "base_int8.onnx", threads=1)
        b_base_s = time.perf_counter() - t
        b_build, b_logits, b_adapters = [], [], []
        for k, folder in enumerate(adapters):
            t = time.perf_counter()
            path = adapter_file(folder, modules, cfg, head_names, tmp / f"b{k}.onnx_adapter")
            adapter = ort.LoraAdapter()
            adapter.Load(str(path))
            b_build.append(time.perf_counter() - t)
            b_adapters.append(adapter)
        b_rss = mb_per_adapter("b", [tmp / "base_int8.onnx", *(tmp / f"b{k}.onnx_adapter" for k in range(len(adapters)))])
        for adapter in b_adapters:
            ro = ort.RunOptions()
            ro.add_active_adapter(adapter)
            b_logits.append(np.concatenate([b_session.run(["logits"], feeds_for(b_session, f), ro)[0] for f in singles]))

        # speed: one text per call, interleaved (a) and (b) on adapter 0
        ro0 = ort.RunOptions()
        ro0.add_active_adapter(b_adapters[0])
        runs = {
            "a": lambda: [a_sessions[0].run(["logits"], feeds_for(a_sessions[0], f)) for f in singles],
            "b": lambda: [b_session.run(["logits"], feeds_for(b_session, f), ro0) for f in singles],
        }
        times = {k: [] for k in runs}
        for r in range(5):
            for k in ("a", "b") if r % 2 == 0 else ("b", "a"):
                t = time.perf_counter()
                runs[k]()
                times[k].append(time.perf_counter() - t)
        agreement = [float(np.mean(a.argmax(1) == b.argmax(1))) for a, b in zip(a_logits, b_logits)]
        distinct = float(np.mean([np.abs(b_logits[0] - b).max() for b in b_logits[1:]])) if len(b_logits) > 1 else 0.0
        result |= {
            "a_per_version": {
                "seconds_to_add_one": a_build,
                "rss_mb_per_adapter": a_rss,
                "items_per_s": len(texts) / statistics.median(times["a"]),
            },
            "b_shared_base": {
                "base_seconds_once": b_base_s,
                "seconds_to_add_one": b_build,
                "rss_mb_per_adapter": b_rss,
                "items_per_s": len(texts) / statistics.median(times["b"]),
                "fused_ops": fused,
                "nodes_left_float": len(excluded),
            },
            "top1_agreement_b_vs_a": agreement,
            "max_abs_logit_diff_b_vs_a": [float(np.abs(a - b).max()) for a, b in zip(a_logits, b_logits)],
            "adapters_differ_in_b_by": distinct,
        }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    a, b = result["a_per_version"], result["b_shared_base"]
    print(
        f"(a) per version: {statistics.median(a['seconds_to_add_one']):.1f} s to add an adapter, {a['rss_mb_per_adapter']:.1f} MB each,"
        f" {a['items_per_s']:.0f} items/s"
    )
    print(
        f"(b) shared base: {b['base_seconds_once']:.1f} s once, then {1000 * statistics.median(b['seconds_to_add_one']):.1f} ms to add an"
        f" adapter, {b['rss_mb_per_adapter']:.2f} MB each, {b['items_per_s']:.0f} items/s; fused {b['fused_ops']}"
    )
    print(
        f"(b) vs (a): top-1 agreement {min(result['top1_agreement_b_vs_a']):.2%} at worst, max |dlogit|"
        f" {max(result['max_abs_logit_diff_b_vs_a']):.3f}"
    )
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
