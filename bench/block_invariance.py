"""Whether 8-bit weights in larger blocks decode the same in a batch as alone, and what they save a decode step.

    python bench/block_invariance.py BASE_BUILD [ADAPTER_FILE]

BASE_BUILD is a causal-LM base build folder (e.g. under .modelcd/cache/llm_bases/ after `make demo`); ADAPTER_FILE a
gated .onnx_adapter of that base, else an adapter of random LoRA weights (seeded). For 8-bit weights at each of BLOCKS,
quantized from the build's FP32 twin as the weight variants are (lib/causal_lm/variants.quantize_variant, at the build's
accuracy_level), in the session the server batches in (lib/causal_lm/batched.py):
- every prompt decoded greedily alone, then all of them together in one batch (each row with the adapter, one more row
  on the build's own slots, as the fidelity gate's batched probe decodes them): how many token sequences are equal;
- the same rows stepped again, teacher-forced on the tokens each decoded alone: the largest |Δlogit| of any decode step,
  batched against alone, with the adapter and without;
- the decode step's milliseconds at batch 1 and 8, the block sizes interleaved.
Writes bench/results/block_invariance.json; `python bench/render_docs.py` renders it into docs/benchmarks.md.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from machine import machine

from modelcd_assets.lib.causal_lm.batched import Adapter, Batch, BatchedSession, batched_greedy
from modelcd_assets.lib.causal_lm.build import BaseBuild, copy_side_files
from modelcd_assets.lib.causal_lm.decoder import Decoder
from modelcd_assets.lib.causal_lm.variants import MODEL_FILE, Variant, quantize_variant

RESULTS = Path(__file__).parent / "results" / "block_invariance.json"
BLOCKS = ((32, True), (64, True), (128, True), (128, False))  # (block size, symmetric); 32 symmetric is what is served
PROMPTS = (
    "How do I reset my password?",
    "i was charged twice for my subscription fee. thanks.",
    "hello team, the export button keeps crashing in the app.",
    "my invoice shows the wrong company address, can you fix it before the audit next week?",
    "please cancel my subscription, the renewal came out of my card yesterday.",
    "the mobile app logs me out every few minutes since the update.",
)
NEW_TOKENS = 24
ROUNDS, REPS = 5, 20


def _name(block: int, symmetric: bool) -> str:
    return f"int8-b{block}" + ("" if symmetric else "-asym")


def _described(build: BaseBuild) -> str:
    """The base build's decoder, as its GenAI config describes it."""
    m = json.loads((build.int8 / "genai_config.json").read_text())["model"]
    d = m["decoder"]
    return f"{m['type']} decoder, {d['num_hidden_layers']} layers, hidden size {d['hidden_size']}, vocabulary {m['vocab_size']}"


def _teacher_forced(session: BatchedSession, prompts: list[list[int]], tokens: list[list[int]], adapters: list) -> list[np.ndarray]:
    """Each row's logits at each decode step, [steps, vocab], fed the given tokens, all rows in one batch."""
    batch, steps = Batch(), len(tokens[0])
    for prompt, adapter in zip(prompts, adapters, strict=True):
        batch.join(session.prefill(prompt, adapter))
    out = [[] for _ in prompts]
    for s in range(steps - 1):
        session.step(batch, [t[s] for t in tokens])
        for i, row in enumerate(batch.rows):
            out[i].append(row.logits)
    return [np.stack(o) for o in out]


def _step_ms(session: BatchedSession, prompt: list[int], rows: int, adapter) -> float:
    batch = Batch()
    for _ in range(rows):
        batch.join(session.prefill(prompt, adapter))
    times = []
    for _ in range(REPS):
        t = time.perf_counter()
        session.step(batch, [int(np.argmax(r.logits)) for r in batch.rows])
        times.append(1000 * (time.perf_counter() - t))
    return float(np.median(times))


def main(build_dir: Path, adapter_file: Path | None) -> int:
    build = BaseBuild(build_dir)
    options = build.options()
    decoder = Decoder(build.int8)
    prompts = [decoder.encode_chat([{"role": "user", "content": p}]) for p in PROMPTS]
    results, sessions = {}, {}
    with tempfile.TemporaryDirectory(dir=build_dir, prefix=".block-invariance-") as tmp:  # beside int8/, never inside it
        for block, symmetric in BLOCKS:
            name = _name(block, symmetric)
            folder = Path(tmp) / name
            copy_side_files(build.fp32, folder)
            variant = Variant(name, "rtn", 8, symmetric=symmetric, block_size=block)
            quantize_variant(build.fp32 / MODEL_FILE, folder / MODEL_FILE, variant, int(options["accuracy_level"]))
            session = sessions[name] = BatchedSession(folder)
            if adapter_file is not None:
                adapter = session.adapter(adapter_file)
            else:
                rng = np.random.default_rng(0)
                adapter = Adapter.__new__(Adapter)
                adapter.arrays = {n: (0.02 * rng.standard_normal(v.shape)).astype(v.dtype) for n, v in session.slots.items()}
            row = {}
            for label, lora in (("with_adapter", adapter), ("without_adapter", None)):
                alone = [batched_greedy(session, [p], NEW_TOKENS, [lora], decoder.eos_ids)[0][0] for p in prompts]
                together = batched_greedy(session, [prompts[0], *prompts], NEW_TOKENS, [None, *[lora] * len(prompts)], decoder.eos_ids)[1:]
                # teacher-forced on what each decoded alone, its end of turn repeated to NEW_TOKENS
                forced = [(tokens + [decoder.eos_ids[0]] * NEW_TOKENS)[:NEW_TOKENS] for tokens in alone]
                one = [_teacher_forced(session, [p], [t], [lora])[0] for p, t in zip(prompts, forced, strict=True)]
                many = _teacher_forced(session, prompts, forced, [lora] * len(prompts))
                diffs = [float(np.max(np.abs(a - b))) for a, b in zip(one, many, strict=True)]
                row[label] = {
                    "sequences": len(prompts),
                    "equal": sum(t == a for (t, _), a in zip(together, alone, strict=True)),
                    "max_abs_logit_diff": max(diffs, default=0.0),
                }
            results[name] = row | {"block_size": block, "symmetric": symmetric}
            print(name, json.dumps(row), flush=True)
        step_ms = {name: {"1": [], "8": []} for name in sessions}
        for _ in range(ROUNDS):
            for name, session in sessions.items():
                for rows in (1, 8):
                    step_ms[name][str(rows)].append(_step_ms(session, prompts[0], rows, None))
    served = _name(32, True)
    for name, by in step_ms.items():
        results[name]["decode_step_ms"] = {rows: float(np.median(v)) for rows, v in by.items()}
        results[name]["step_over_served"] = {
            rows: results[served]["decode_step_ms"][rows] / m for rows, m in results[name]["decode_step_ms"].items()
        }
    worst = results[served]["with_adapter"]["max_abs_logit_diff"]
    result = {
        "machine": machine(),
        "build": str(build_dir),
        "model": _described(build),
        "adapter": str(adapter_file) if adapter_file else "random LoRA weights (normal, std 0.02, seed 0)",
        "prompts": len(prompts),
        "new_tokens": NEW_TOKENS,
        "accuracy_level": int(options["accuracy_level"]),
        "blocks": results,
        "targets": {
            "served_block_rows_bit_exact": {
                "target": "max |Δlogit| 0, batched against alone, at the served block size (32)",
                "measured": worst,
                "met": worst == 0.0,
            }
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    for name, r in results.items():
        print(
            f"{name:16s} equal {r['with_adapter']['equal']}/{r['with_adapter']['sequences']} with the adapter, "
            f"{r['without_adapter']['equal']}/{r['without_adapter']['sequences']} without; max |Δlogit| "
            f"{r['with_adapter']['max_abs_logit_diff']:.3g} / {r['without_adapter']['max_abs_logit_diff']:.3g}; step "
            f"{r['decode_step_ms']['1']:.2f} ms at 1, {r['decode_step_ms']['8']:.2f} ms at 8 "
            f"({r['step_over_served']['1']:.2f}x / {r['step_over_served']['8']:.2f}x the served block's speed)"
        )
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) == 3 else None))
