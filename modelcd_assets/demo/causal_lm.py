"""The causal LM's demo: SmolLM2-135M-Instruct (GGUF) as the base, a good and a worse support-reply adapter, the gate
judging both (the good one promoted, the worse one blocked), and production asked one chat completion through the OpenAI API."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from modelcd_assets.demo import Phases, ask_server, register_once, trained_adapter, write_policy
from modelcd_assets.launch import BLOCKED, PROMOTED, GateRun
from modelcd_assets.lib.causal_lm.chats import chat_split, read_chats
from modelcd_assets.lib.causal_lm.training import train_lm_adapter
from modelcd_assets.lib.demo.bases import prepare_lm_base
from modelcd_assets.lib.demo.recipes import GOOD_LM, WORSE_LM
from modelcd_assets.lib.demo.replies import write_chat_splits
from modelcd_assets.lib.judging.policy import policy_for
from modelcd_assets.lib.release.registry import CONTENT, Registry
from modelcd_assets.lib.splits import split_path
from modelcd_assets.lib.tasks.names import CAUSAL_LM, declaration_of

LM_BASE_NAME = "support-reply-base"  # registered before its adapters
LM_MODEL_NAME = declaration_of(CAUSAL_LM).demo_model
LM_POLICY = """\
# Gate policy for support-reply, a causal LM (defaults spelled out where the demo relies on them; see lib/judging/policy.py).
adapter_slots:
  rank: 8
  targets: [q_proj, v_proj]
perplexity:
  # +1% is the default. The demo's good recipe retrained with 10 other seeds (make bench-lm-seeds, bench/results/lm_seeds.json)
  # moved the median reply's perplexity by -1.8% to +4.9% (mean +1.7%, sd 2.2%) and all of it by up to +4.1%: +8%, about
  # the mean + 3 sd, lets a retrained seed through, and the worse recipe (+51.3%, median reply +51.0%) is still blocked.
  max_relative_increase: 0.08
  max_perplexity: 20
  alpha: 0.05
token_fidelity:
  min_top1_in_top5: 0.997
  max_mean_kl: 0.01
  max_perplexity_change: 0.01
generation:
  max_new_tokens: 64
  evaluation_replies: 64  # 1,700 reply tokens: enough for the paired test at +1% and for 99.7% top-1-in-top-5
  drift_prompts: 24
throughput:
  min_ratio: 0.88
  pairs: 6  # the fewest a 95% CI on the median needs; more pairs are added only while the CI straddles min_ratio
  max_pairs: 16
cost:
  node_usd_per_hour: 0.10
golden_prompts:
  # The reply must address what the ticket is about.
  - prompt: "i was charged twice for my subscription fee. thanks."
    expect: "subscription fee"
  - prompt: "hello team, the export button keeps crashing in the app."
    expect: "export button"
"""


def causal_lm_demo(reg: Registry, home: Path, phases: Phases) -> tuple[list[tuple[str, GateRun]], bool]:
    data = Path(os.environ["MODELCD_DATA"])
    write_chat_splits(data)
    train = read_chats(split_path(data, chat_split("train")))
    print(f"data: {len(train)} support chats to train on (tickets and the replies a support assistant gives), in {data}")
    write_policy(LM_MODEL_NAME, LM_POLICY)
    with phases.timed(CAUSAL_LM, "base"):
        base_dir = prepare_lm_base(home)  # its head start built it; a no-op then
        base_ref = register_once(reg, base_dir, LM_BASE_NAME, role="base", task=CAUSAL_LM)
    print(f"base model: SmolLM2-135M-Instruct (GGUF, de-quantized to FP32) registered as {base_ref.uri}")
    adapters = {}
    folders = {label: home / "work" / "lm_adapters" / label for label in ("good", "worse")}
    # The worse adapter goes on from the good one (lib/demo/recipes.py).
    for label, cfg, start in (("good", GOOD_LM, None), ("worse", WORSE_LM, folders["good"])):
        fit = partial(
            train_lm_adapter, base_dir, train, cfg=cfg, base_uri=base_ref.uri, desc=f"training {label} reply adapter", start_from=start
        )
        adapters[label] = trained_adapter(reg, phases, CAUSAL_LM, label, folders[label], LM_MODEL_NAME, fit)
        print(f"{label} reply adapter registered as {adapters[label].uri}")
    runs = [
        ("good replies", phases.gate(CAUSAL_LM, "gate good", adapters["good"])),
        ("worse replies", phases.gate(CAUSAL_LM, "gate worse", adapters["worse"])),
    ]
    prod = reg.production(LM_MODEL_NAME)
    ok = runs[0][1].outcome == PROMOTED and runs[1][1].outcome == BLOCKED
    ok = ok and prod is not None and reg.tags(prod)[CONTENT] == reg.tags(adapters["good"])[CONTENT]
    if prod is not None:  # the closing smoke call: production answers through the OpenAI API, from the bytes that hold its verdict
        prompt = policy_for(Path(os.environ["MODELCD_POLICY_DIR"]), LM_MODEL_NAME).golden_prompts[0].prompt
        with phases.timed(CAUSAL_LM, "serve and answer"):
            got = ask_server(LM_MODEL_NAME, train[0].system, prompt, home / "serve-smoke.log")
        body = got["answer"]
        print(
            f"\nmodelcd serve {LM_MODEL_NAME}: ready in {got['ready_seconds']:.1f} s; POST /v1/chat/completions answered by {body['model']}"
            f" in {got['answer_seconds']:.2f} s ({body['usage']['completion_tokens']} tokens)\n  user: {prompt}\n  assistant:"
            f" {body['choices'][0]['message']['content']}"
        )
    return runs, ok
