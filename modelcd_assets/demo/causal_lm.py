"""The causal LM's demo: SmolLM2-135M-Instruct (GGUF) as the base, a good and a worse support-reply adapter, and the gate
judging them: the good one's snapshot partway through its training promoted as the first version, the good one rolled
out against it through shadow and canary steps on live chat completions, production asked one chat completion through the
OpenAI API, and the worse one blocked."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from modelcd_assets.demo import Phases, ask, register_once, trained_adapter, write_policy
from modelcd_assets.demo.live import gate_and_roll_out
from modelcd_assets.launch import BLOCKED, PROMOTED, GateRun
from modelcd_assets.lib.causal_lm.chats import chat_split, read_chats
from modelcd_assets.lib.causal_lm.training import train_lm_adapter
from modelcd_assets.lib.demo.bases import prepare_lm_base
from modelcd_assets.lib.demo.recipes import FIRST_PRODUCTION_LM_STEP, GOOD_LM, WORSE_LM
from modelcd_assets.lib.demo.replies import write_chat_splits
from modelcd_assets.lib.judging.policy import policy_for
from modelcd_assets.lib.release.registry import CONTENT, Registry
from modelcd_assets.lib.splits import split_path
from modelcd_assets.lib.tasks.names import CAUSAL_LM, declaration_of
from modelcd_assets.live_rollout import live_server
from modelcd_assets.serving.loadgen import CHAT

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
serving:
  poll_seconds: 1  # how soon the server follows the alias and the rollout's steps
rollout:
  # Steps of seconds, so that the demo shows each one; a real policy's last minutes (see lib/judging/rollout_policy.py).
  min_samples: 10
  # A canary step passes the error and NaN rates only once each is bounded within its limit: within a point (the default)
  # that takes about 420 answers an arm without an error, 3 minutes of this demo's callers; within 4 points, about 100.
  # A copy erring on 5% of requests still fails it (make bench-rollout runs one in a sandbox of this policy).
  metrics:
    error_rate: {max_rate_increase: 0.04}
    nan_rate: {max_rate_increase: 0.04}
  steps:
    # A shadow copy is generated after production's answer, beside the next requests: on a machine of few cores its
    # timings are not the candidate's own. The shadow step judges the errors and the answers' lengths; the canary step,
    # where each arm answers callers of its own, judges TTFT, TPOT and tokens per answer too. first_token_agreement is left
    # out: it asks a candidate to answer as production does (a re-quantized or recalibrated production), and the good
    # adapter words its replies anew (measured against the demo's earlier adapter: 7 of 18 greedy first tokens agreed);
    # their quality is the offline perplexity gate's to judge.
    # On 2 cores one generation of 12 tokens takes under half a second, and at most serving.max_shadow_in_flight copies (1)
    # run at once. With production served before the gate and the callers asking within a second or two of the step's
    # start, a 20 s shadow step gathered 25 pairs and a 15 s canary step 30 answers in its smaller arm (10 needed in each):
    # 15 s and 10 s keep half again what the steps need.
    - shadow: 0.5
      for: 15s
      metrics: [error_rate, nan_rate, length_ratio]
    - canary: 0.5
      for: 10s
      max_for: 150s
    - promote
"""
# The live callers: one at a time, so that the shadow copies are not dropped for want of a core (each is counted when it
# is), with short answers, so that each step sees enough of them.
LOAD_CALLERS_AT_ONCE = 1
LOAD_MAX_TOKENS = 12


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
    folders = {label: home / "work" / "lm_adapters" / label for label in ("earlier", "good", "worse")}
    # The first production is the good adapter as it stood partway through its training; the worse adapter goes on from the
    # good one (lib/demo/recipes.py).
    for label, cfg, start, snapshots in (
        ("good", GOOD_LM, None, {FIRST_PRODUCTION_LM_STEP: folders["earlier"]}),
        ("worse", WORSE_LM, folders["good"], {}),
    ):
        fit = partial(
            train_lm_adapter,
            base_dir,
            train,
            cfg=cfg,
            base_uri=base_ref.uri,
            desc=f"training {label} reply adapter",
            start_from=start,
            snapshots=snapshots,
        )
        adapters[label] = trained_adapter(reg, phases, CAUSAL_LM, label, folders[label], LM_MODEL_NAME, fit, tuple(snapshots.values()))
        print(f"{label} reply adapter registered as {adapters[label].uri}")
    adapters["earlier"] = register_once(reg, folders["earlier"], LM_MODEL_NAME)
    print(
        f"earlier reply adapter (the good one after {FIRST_PRODUCTION_LM_STEP} of {GOOD_LM.steps} steps) registered as "
        f"{adapters['earlier'].uri}"
    )
    runs = []
    if reg.production(LM_MODEL_NAME) is None:  # a demo run before left production in place
        runs.append(("earlier replies (first version)", phases.gate(CAUSAL_LM, "gate earlier", adapters["earlier"])))
    traffic = read_chats(split_path(data, chat_split("traffic_current")))
    bodies = [
        {
            "model": LM_MODEL_NAME,
            "max_tokens": LOAD_MAX_TOKENS,
            "temperature": 0,
            "messages": [{"role": "system", "content": c.system}, {"role": "user", "content": c.user}],
        }
        for c in traffic
    ]
    with live_server(LM_MODEL_NAME, home / "work" / "live" / LM_MODEL_NAME) as live:
        runs.append(
            ("good replies", gate_and_roll_out(reg, phases, CAUSAL_LM, "good", adapters["good"], live, CHAT, bodies, LOAD_CALLERS_AT_ONCE))
        )
        prod = reg.production(LM_MODEL_NAME)
        if prod is not None:  # the closing smoke call: production answers through the OpenAI API, from the bytes that hold its verdict
            prompt = policy_for(Path(os.environ["MODELCD_POLICY_DIR"]), LM_MODEL_NAME).golden_prompts[0].prompt
            with phases.timed(CAUSAL_LM, "serve and answer"):
                ready = live.wait_ready(prod.version)
                got = ask(live.url, LM_MODEL_NAME, train[0].system, prompt)
            body = got["answer"]
            print(
                f"\nmodelcd serve {LM_MODEL_NAME}: version {prod.version} served in {ready:.1f} s; POST /v1/chat/completions answered by"
                f" {body['model']} in {got['answer_seconds']:.2f} s ({body['usage']['completion_tokens']} tokens)\n  user: {prompt}\n"
                f"  assistant: {body['choices'][0]['message']['content']}"
            )
    runs.append(("worse replies", phases.gate(CAUSAL_LM, "gate worse", adapters["worse"])))
    outcomes = {label: run.outcome for label, run in runs}
    ok = all(outcome == PROMOTED for label, outcome in outcomes.items() if label.startswith("earlier"))
    ok = ok and outcomes["good replies"] == PROMOTED and outcomes["worse replies"] == BLOCKED
    prod = reg.production(LM_MODEL_NAME)
    return runs, ok and prod is not None and reg.tags(prod)[CONTENT] == reg.tags(adapters["good"])[CONTENT]
