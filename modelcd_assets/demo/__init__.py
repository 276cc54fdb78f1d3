"""`modelcd demo`: for each task that declares a demo (lib/tasks/names.TaskDeclaration.demo), a base, a good and a worse
LoRA adapter, and the gated pipeline judging them; then their gate tables. The built-in tasks' demos are demo/classifier.py
(MiniLM with two ticket classifiers) and demo/causal_lm.py (SmolLM2-135M-Instruct with two support-reply adapters). What
they share is here: the phases' timings, registering once, the policy file, the signing keys and the closing server call
(demo/live.py: production served to a load generator's callers while a good adapter is rolled out)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from modelcd_assets.launch import GateRun, print_gate_table, run_gate
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.hashing import folder_manifest, manifest_hash
from modelcd_assets.lib.judging.policy import policy_path
from modelcd_assets.lib.operations.background import Background
from modelcd_assets.lib.release.registry import CONTENT, CandidateRef, Registry
from modelcd_assets.lib.release.signing import init_keys
from modelcd_assets.lib.tasks.names import declarations, load_declared


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


def trained_adapter(
    reg: Registry,
    phases: Phases,
    task: str,
    label: str,
    folder: Path,
    name: str,
    train: Callable[[Path], object],
    snapshots: tuple[Path, ...] = (),
) -> CandidateRef:
    """The adapter in folder, trained there by train(folder) unless a run before left one, and the snapshots the training
    saves too (the phase 'training LABEL' says which), registered once under name."""
    with phases.timed(task, f"training {label}") as entry:
        entry["reused"] = all((Path(f) / "adapter_model.safetensors").is_file() for f in (folder, *snapshots))
        if not entry["reused"]:
            train(Path(folder))
    for snapshot in snapshots:  # registered first: a snapshot is the earlier version
        register_once(reg, snapshot, name)
    return register_once(reg, folder, name)


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


def write_policy(name: str, text: str) -> None:
    path = policy_path(Path(os.environ["MODELCD_POLICY_DIR"]), name)
    if not path.exists():
        path.write_text(text)


def ensure_keys(reg: Registry) -> None:
    if not reg.keys.private.exists():  # what 'modelcd keys init' does: registrations and verdicts are signed with it
        init_keys(reg.keys)
        print(f"signing key pair created: {reg.keys.private}, {reg.keys.public}")


def main(task: str = "all", timings: Path | None = None) -> int:
    """Both tasks' demos (or one), then their gate tables; exit 0 when each showed what it must. timings: a JSON file for the
    phases' seconds (Phases), which bench/bench_demo.py reads."""
    started = time.perf_counter()
    phases = Phases()
    home = Path(os.environ["MODELCD_HOME"])
    reg = Registry.from_env()
    print(f"modelcd demo: state in {home}")
    ensure_keys(reg)
    results = []
    selected = [d for d in declarations() if d.demo and task in ("all", d.name)]
    # Each demo's head start (TaskDeclaration.demo_head_start) runs in a process of its own from the start, at the lowest
    # CPU priority: what it builds on the cycles the demos before it leave idle is time its own demo does not wait.
    head_starts = Background(home / "work" / "head-start.log")
    try:
        for declared in selected:
            if declared.demo_head_start:
                head_starts.submit(declared.name, declared.demo_head_start, f"task {declared.name!r}'s demo head start", home)
        for declared in selected:
            demo = load_declared(declared.demo, f"task {declared.name!r}'s demo")
            if declared.name in head_starts:
                waited = time.perf_counter()
                seconds = head_starts.result(declared.name)
                phases.phases.append(
                    {
                        "task": declared.name,
                        "phase": "head start",
                        "overlapped": True,
                        "seconds": round(seconds, 2),
                        "waited": round(time.perf_counter() - waited, 2),
                    }
                )
            results.append((declared.demo_model, *demo(reg, home, phases)))
    finally:
        head_starts.close()
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


def ask(url: str, model: str, system: str, prompt: str, max_tokens: int = 64, timeout: float = 180) -> dict:
    """A server's chat completion (its body) of prompt, through the OpenAI API, and the seconds it took to answer."""
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
        raise ModelcdError(f"the server answered {r.status_code}: {r.text[:300]}")
    return {"answer": r.json(), "answer_seconds": time.perf_counter() - start}
