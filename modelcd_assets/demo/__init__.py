"""`modelcd demo`: for each task a base, a good and a worse LoRA adapter, and the gated pipeline judging them: MiniLM with
two ticket classifiers, and SmolLM2-135M-Instruct with two support-reply adapters."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path

import httpx

from modelcd_assets.launch import BLOCKED, PROMOTED, GateRun, print_gate_table, run_gate
from modelcd_assets.lib.causal_lm.base import prepare_causal_lm_base, smollm2_gguf
from modelcd_assets.lib.causal_lm.chats import chat_split, read_chats
from modelcd_assets.lib.causal_lm.training import train_lm_adapter
from modelcd_assets.lib.classifier.base_model import prepare_minilm_base
from modelcd_assets.lib.classifier.training import train_adapter
from modelcd_assets.lib.demo.models import DEMO_MODELS, LM_BASE_NAME
from modelcd_assets.lib.demo.recipes import GOOD, GOOD_LM, WORSE, WORSE_LM, WORSE_TRAIN_EXAMPLES
from modelcd_assets.lib.demo.replies import write_chat_splits
from modelcd_assets.lib.demo.tickets import LABELS, write_splits
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.hashing import folder_manifest, manifest_hash
from modelcd_assets.lib.judging.policy import policy_for, policy_path
from modelcd_assets.lib.operations.processes import start_process, stop_process
from modelcd_assets.lib.release.registry import CONTENT, CandidateRef, Registry
from modelcd_assets.lib.release.signing import init_keys
from modelcd_assets.lib.splits import read_split, split_path
from modelcd_assets.lib.tasks.names import CAUSAL_LM, CLASSIFICATION

BASE_NAME = "ticket-intent-base"
MODEL_NAME = DEMO_MODELS[CLASSIFICATION]
POLICY = """\
# Gate policy for ticket-intent (defaults spelled out; see modelcd_assets/lib/judging/policy.py).
accuracy:
  tolerance_points: 0.3
  absolute_floor: 0.75
  alpha: 0.05
int8_fidelity:
  min_top1_agreement: 0.99
drift:
  prediction_threshold: 0.1
  input_numeric_threshold: 0.1
  input_drift_share: 0.5
throughput:
  min_ratio: 0.88
  p99_slo_ms: 100
golden:
  - text: "i was charged twice for my subscription fee. thanks."
    label: billing
  - text: "my parcel is still missing, where is my delivery?"
    label: shipping
"""


LM_MODEL_NAME = DEMO_MODELS[CAUSAL_LM]
LM_POLICY = """\
# Gate policy for support-reply, a causal LM (defaults spelled out where the demo relies on them; see lib/judging/policy.py).
adapter_slots:
  rank: 8
  targets: [q_proj, v_proj]
perplexity:
  # +1% is the default. The demo's good recipe retrained with 10 other seeds (make bench-lm-seeds, bench/results/lm_seeds.json)
  # moved the median reply's perplexity by -1.4% to +4.8% (mean +1.8%, sd 2.1%) and all of it by up to +3.9%: +8%, the
  # mean + 3 sd, lets a retrained seed through, and the worse recipe (+52.7%, median reply +42.6%) is still blocked.
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


def register_once(reg: Registry, folder: Path, name: str, **kw) -> CandidateRef:
    """Reuse the version whose content matches folder, so repeated demos don't pile up versions."""
    content = manifest_hash(folder_manifest(folder))
    try:
        existing = reg.versions(name)
    except Exception:
        existing = []
    for ref in existing:
        if reg.tags(ref).get(CONTENT) == content:
            return ref
    return reg.register(folder, name, **kw)


class Phases:
    """How long each phase of the demo took, wall seconds, in order; a gated run's phase also holds each of its steps' seconds
    (Dagster's step stats), so a slow gate shows which asset made it slow. `modelcd demo --timings FILE` writes them."""

    def __init__(self) -> None:
        self.phases: list[dict] = []

    @contextlib.contextmanager
    def timed(self, task: str, name: str):
        start = time.perf_counter()
        entry = {"task": task, "phase": name}
        try:
            yield entry
        finally:
            entry["seconds"] = round(time.perf_counter() - start, 2)
            self.phases.append(entry)

    def gate(self, task: str, name: str, ref: CandidateRef, **kw) -> GateRun:
        with self.timed(task, name) as entry:
            run = run_gate(ref, progress=True, **kw)
            entry["steps"] = _step_seconds(run.run_id)
        return run


def _step_seconds(run_id: str) -> dict[str, float]:
    import dagster as dg

    stats = dg.DagsterInstance.get().get_run_step_stats(run_id) if run_id else []
    return {s.step_key: round(s.end_time - s.start_time, 2) for s in stats if s.start_time and s.end_time}


def _write_policy(name: str, text: str) -> None:
    path = policy_path(Path(os.environ["MODELCD_POLICY_DIR"]), name)
    if not path.exists():
        path.write_text(text)


def _ensure_keys(reg: Registry) -> None:
    if not reg.keys.private.exists():  # what 'modelcd keys init' does: registrations and verdicts are signed with it
        init_keys(reg.keys)
        print(f"signing key pair created: {reg.keys.private}, {reg.keys.public}")


def classifier_demo(reg: Registry, home: Path, phases: Phases) -> tuple[list[tuple[str, GateRun]], bool]:
    splits = write_splits(Path(os.environ["MODELCD_DATA"]))
    print(f"data: synthetic support tickets, {', '.join(f'{k} {len(read_split(v))}' for k, v in splits.items())}")
    _write_policy(MODEL_NAME, POLICY)
    with phases.timed(CLASSIFICATION, "base"):
        base_dir = prepare_minilm_base(home / "work" / "base", list(LABELS))
        base_ref = register_once(reg, base_dir, BASE_NAME, role="base")
    print(f"base model: all-MiniLM-L6-v2 registered as {base_ref.uri}")
    train = read_split(splits["train"])
    adapters = {}
    for label, cfg, examples in (("good", GOOD, train), ("worse", WORSE, train[:WORSE_TRAIN_EXAMPLES])):
        folder = home / "work" / "adapters" / label
        with phases.timed(CLASSIFICATION, f"training {label}") as entry:
            entry["reused"] = (folder / "adapter_model.safetensors").is_file()
            if not entry["reused"]:
                train_adapter(base_dir, examples, folder, cfg, base_ref.uri, desc=f"training {label} adapter")
        adapters[label] = register_once(reg, folder, MODEL_NAME)
        print(f"{label} adapter registered as {adapters[label].uri}")
    runs = [
        ("good", phases.gate(CLASSIFICATION, "gate good", adapters["good"])),
        ("worse", phases.gate(CLASSIFICATION, "gate worse", adapters["worse"])),
        (
            "good on shifted traffic",
            phases.gate(CLASSIFICATION, "gate good on shifted traffic", adapters["good"], traffic_sample="traffic_shifted"),
        ),
    ]
    prod = reg.production(MODEL_NAME)
    ok = runs[0][1].outcome == PROMOTED and runs[1][1].outcome == BLOCKED and runs[2][1].outcome == BLOCKED
    return runs, ok and prod is not None and reg.tags(prod)[CONTENT] == reg.tags(adapters["good"])[CONTENT]


def causal_lm_demo(reg: Registry, home: Path, phases: Phases) -> tuple[list[tuple[str, GateRun]], bool]:
    data = Path(os.environ["MODELCD_DATA"])
    write_chat_splits(data)
    train = read_chats(split_path(data, chat_split("train")))
    print(f"data: {len(train)} support chats to train on (tickets and the replies a support assistant gives), in {data}")
    _write_policy(LM_MODEL_NAME, LM_POLICY)
    with phases.timed(CAUSAL_LM, "base"):
        base_dir = prepare_causal_lm_base(smollm2_gguf(), home / "work" / "smollm2")
        base_ref = register_once(reg, base_dir, LM_BASE_NAME, role="base", task=CAUSAL_LM)
    print(f"base model: SmolLM2-135M-Instruct (GGUF, de-quantized to FP32) registered as {base_ref.uri}")
    adapters = {}
    for label, cfg in (("good", GOOD_LM), ("worse", WORSE_LM)):
        folder = home / "work" / "lm_adapters" / label
        with phases.timed(CAUSAL_LM, f"training {label}") as entry:
            entry["reused"] = (folder / "adapter_model.safetensors").is_file()
            if not entry["reused"]:
                train_lm_adapter(base_dir, train, folder, cfg, base_ref.uri, desc=f"training {label} reply adapter")
        adapters[label] = register_once(reg, folder, LM_MODEL_NAME)
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


def main(task: str = "all", timings: Path | None = None) -> int:
    """Both tasks' demos (or one), then their gate tables; exit 0 when each showed what it must. timings: a JSON file for the
    phases' seconds (Phases), which bench/bench_demo.py reads."""
    started = time.perf_counter()
    phases = Phases()
    home = Path(os.environ["MODELCD_HOME"])
    reg = Registry.from_env()
    print(f"modelcd demo: state in {home}")
    _ensure_keys(reg)
    results = []
    for demo_task, demo in ((CLASSIFICATION, classifier_demo), (CAUSAL_LM, causal_lm_demo)):
        if task in ("all", demo_task):
            results.append((DEMO_MODELS[demo_task], *demo(reg, home, phases)))
    for name, runs, _ in results:
        print()
        print_gate_table(runs)
        prod = reg.production(name)
        print(f"\nproduction alias of {name}: version {prod.version if prod else 'none'}")
    total = time.perf_counter() - started
    if timings is not None:
        outcomes = {name: {label: run.outcome for label, run in runs} for name, runs, _ in results}
        Path(timings).write_text(json.dumps({"seconds": round(total, 2), "phases": phases.phases, "outcomes": outcomes}, indent=1))
    print(f"demo finished in {total:.0f} s; see it all with 'make ui'")
    return 0 if all(ok for _, _, ok in results) else 1


# The demo's closing call to a causal LM's server: `modelcd serve NAME` started on a free loopback port, asked one chat
# completion through the OpenAI API, and stopped.
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ask_server(model: str, system: str, prompt: str, log: Path, max_tokens: int = 64, timeout: float = 180) -> dict:
    """The server's answer (its chat completion body) and the seconds it took to become ready and to answer."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log, "wb") as out:
        proc = start_process(
            [sys.executable, "-m", "modelcd_assets.cli", "serve", model, "--port", str(port), "--admin-port", "0"], stdout=out, stderr=out
        )
        try:
            start, deadline = time.perf_counter(), time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    raise ModelcdError(f"'modelcd serve {model}' exited with code {proc.returncode}; see {log}")
                if time.monotonic() > deadline:
                    raise ModelcdError(f"'modelcd serve {model}' was not ready within {timeout:.0f} s; see {log}")
                try:
                    if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            ready = time.perf_counter() - start
            start = time.perf_counter()
            r = httpx.post(
                f"{url}/v1/chat/completions",
                timeout=timeout,
                json={
                    "model": model,
                    "max_tokens": max_tokens,
                    "temperature": 0,
                    "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
                },
            )
            if r.status_code != 200:
                raise ModelcdError(f"the server answered {r.status_code}: {r.text[:300]}; see {log}")
            return {"answer": r.json(), "ready_seconds": ready, "answer_seconds": time.perf_counter() - start}
        finally:
            stop_process(proc)
