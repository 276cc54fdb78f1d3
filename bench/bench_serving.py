"""Serving: p99 during adapter swaps vs steady, swap time vs full reload, unmerged vs merged throughput.

Run after `make demo`: python bench/bench_serving.py
Serves the demo's production adapter on MiniLM from a real `modelcd serve` process, loads it with a
second process (the bounded load generator), and swaps between production and the demo's other
adapter through the admin API. Every number comes from this one run, side by side:
  1. p99 latency while adapters are swapped back to back / p99 of steady serving, in alternating
     phases (steady, swapping, steady, swapping, ...) so drift in machine load hits both;
  2. adapter swap time (load + verify + probe + A/B check + switch, as the server reports it) /
     full reload time, both the in-process base load and a process restart to ready;
  3. unmerged-adapter throughput / merged-model throughput, interleaved A/B trials in one process.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from modelcd_assets.lib.candidate import CandidateRecord
from modelcd_assets.lib.data import read_split
from modelcd_assets.lib.processes import stop_process
from modelcd_assets.lib.registry import Registry
from modelcd_assets.lib.settings import apply_local_defaults

TOKEN = "bench-admin-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(name: str, port: int, log: Path) -> tuple[subprocess.Popen, float]:
    """A `modelcd serve` process; returns it and the seconds from spawn to ready."""
    env = dict(os.environ, MODELCD_ADMIN_TOKEN=TOKEN)
    started = time.perf_counter()
    # --allow-ungated: the demo's only other adapter of the same base is the one its gates blocked; what is timed
    # here is the swap itself, and the gate check on admin loads is covered by the serving tests.
    proc = subprocess.Popen([sys.executable, "-m", "modelcd_assets.cli", "serve", name, "--port", str(port), "--allow-ungated"], env=env,
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT)
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return proc, time.perf_counter() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.05)


def load_phase(url: str, batches_file: Path, requests: int, concurrency: int, out: Path) -> list[dict]:
    subprocess.run([sys.executable, "-m", "modelcd_assets.serving.loadgen", "--url", url, "--batches", str(batches_file),
                    "--requests", str(requests), "--concurrency", str(concurrency), "--out", str(out)], check=True, stderr=subprocess.DEVNULL)
    return json.loads(out.read_text())["results"]


def p99(latencies: list[float]) -> float:
    return float(np.percentile(np.asarray(latencies) * 1000, 99))


def pick_versions(reg: Registry, state: Path, name: str) -> tuple[str, str]:
    """Production, and the newest other adapter of the same base that has a gated build to swap to."""
    prod = reg.production(name)
    if prod is None:
        raise SystemExit(f"no production version of {name}; run 'make demo' first")
    record = CandidateRecord.load(state / "candidates" / name / prod.version)
    for ref in reversed(reg.versions(name)):
        path = state / "candidates" / name / ref.version
        if not (path / "candidate.json").is_file():
            continue
        other = CandidateRecord.load(path)
        if other.content_hash != record.content_hash and other.base_hash == record.base_hash and other.build.onnx.is_file():
            return prod.version, ref.version
    raise SystemExit(f"no second gated adapter of {name} on the same base; run 'make demo' (it gates two)")


def unmerged_vs_merged(state: Path, name: str, version: str, texts: list[str], pairs: int, calls: int) -> dict:
    """Interleaved trials, one thread as each server request gets: batch 1 and batch 8."""
    import torch

    from modelcd_assets.serving.engine import Engine
    from modelcd_assets.serving.lora import read_adapter

    torch.set_num_threads(1)
    record = CandidateRecord.load(state / "candidates" / name / version)
    unmerged = Engine(Path(record.base_dir), "base")
    adapter = read_adapter(Path(record.artifact_dir), version, record.content_hash)
    unmerged.install(adapter)
    merged = Engine(record.build.merged, "merged")
    out = {}
    for batch in (1, 8):
        inputs = [texts[i : i + batch] for i in range(0, calls * batch, batch)]
        ratios = []
        for pair in range(pairs + 1):
            times = {}
            for label, run in (("unmerged", lambda b: unmerged.logits(b, adapter)), ("merged", lambda b: merged.logits(b, None)))[:: 1 if pair % 2 else -1]:
                start = time.perf_counter()
                for b in inputs:
                    run(b)
                times[label] = time.perf_counter() - start
            if pair:  # the first pair warms both up
                ratios.append(times["merged"] / times["unmerged"])
        out[batch] = statistics.median(ratios)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="ticket-intent")
    ap.add_argument("--rounds", type=int, default=3, help="steady and swapping phases each, alternating")
    ap.add_argument("--requests", type=int, default=600, help="requests per phase")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--restarts", type=int, default=3, help="process restarts timed for the full-reload baseline")
    ap.add_argument("--swap-pauses", default="1,0", help="swapping phases: seconds between swaps, comma-separated (0: back to back, the worst case)")
    args = ap.parse_args()
    apply_local_defaults()
    state = Path(os.environ["MODELCD_HOME"])
    reg = Registry.from_env()
    prod, other = pick_versions(reg, state, args.name)
    texts = [ex.text for ex in read_split(Path(os.environ["MODELCD_DATA"]) / "traffic_current.jsonl")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-serving-"))
    (tmp / "batches.json").write_text(json.dumps([[t] for t in texts[:200]]))
    print(f"serving {args.name}: production {prod}, swapping with {other}; {args.rounds} rounds of {args.requests} requests per phase, "
          f"concurrency {args.concurrency}, batch 1; logs in {tmp}", flush=True)

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    admin = {"Authorization": f"Bearer {TOKEN}"}
    modes = [float(x) for x in args.swap_pauses.split(",")]
    proc, _ = start_server(args.name, port, tmp / "server.log")
    steady: list[float] = []
    swapping: dict[float, list[float]] = {m: [] for m in modes}
    swap_seconds: list[float] = []
    swaps = {m: 0 for m in modes}
    failures = 0
    try:
        startup = httpx.get(f"{url}/v1/admin/adapters", headers=admin).json()["loaded"][0]["last_load"]
        for r in range(args.rounds):
            res = load_phase(url, tmp / "batches.json", args.requests, args.concurrency, tmp / f"steady{r}.json")
            failures += sum(x["status"] != 200 for x in res)
            steady += [x["latency_s"] for x in res]
            for pause in modes:
                done = threading.Event()

                def swapper(pause: float = pause) -> None:
                    with httpx.Client(base_url=url, headers=admin, timeout=120) as http:
                        while not done.is_set():
                            target = other if len(swap_seconds) % 2 == 0 else prod
                            resp = http.post("/v1/admin/adapters", json={"version": target})
                            resp.raise_for_status()
                            swap_seconds.append(resp.json()["loaded"]["seconds"])
                            swaps[pause] += 1
                            done.wait(pause)

                t = threading.Thread(target=swapper)
                t.start()
                res = load_phase(url, tmp / "batches.json", args.requests, args.concurrency, tmp / f"swapping{r}-{pause}.json")
                done.set()
                t.join()
                failures += sum(x["status"] != 200 for x in res)
                swapping[pause] += [x["latency_s"] for x in res]
            print(f"round {r + 1}: steady p99 {p99(steady[-args.requests:]):.1f} ms; "
                  + "; ".join(f"{label(m)} p99 {p99(swapping[m][-args.requests:]):.1f} ms" for m in modes), flush=True)
    finally:
        stop_process(proc)
    restarts = []
    for _ in range(args.restarts):
        proc, seconds = start_server(args.name, port, tmp / "server.log")
        stop_process(proc)
        restarts.append(seconds)
    warm_reload = in_process_reload(state, reg, args.name, prod)
    throughput = unmerged_vs_merged(state, args.name, prod, texts, pairs=8, calls=40)

    swap = statistics.median(swap_seconds[1:] or swap_seconds)  # the first swap to `other` also computes its ONNX reference once
    restart = statistics.median(restarts)
    print()
    print(f"requests: {args.rounds * (1 + len(modes)) * args.requests}, failed: {failures}; swaps: {sum(swaps.values())}")
    for m in modes:
        print(f"p99 latency {label(m)} ({swaps[m]} swaps): {p99(swapping[m]):.1f} ms vs steady {p99(steady):.1f} ms "
              f"-> ratio {p99(swapping[m]) / p99(steady):.2f} (target <= 1.2)")
    print(f"swap time (load, verify, probe, A/B, switch): median {swap * 1000:.0f} ms over {len(swap_seconds)} swaps (first {swap_seconds[0] * 1000:.0f} ms)")
    print(f"  / full reload at server start (base from disk, verify, adapter, probe, A/B): {startup['seconds'] * 1000:.0f} ms -> ratio {swap / startup['seconds']:.3f} (target <= 0.1)")
    print(f"  / full reload in a warm process (page cache and imports warm): {warm_reload * 1000:.0f} ms -> ratio {swap / warm_reload:.3f}")
    print(f"  / restart (spawn to ready, median of {len(restarts)}): {restart:.2f} s -> ratio {swap / restart:.3f}")
    print(f"unmerged / merged throughput: batch 1 {throughput[1]:.3f}, batch 8 {throughput[8]:.3f} (target >= 0.85)")
    return 0 if failures == 0 else 1


def label(pause: float) -> str:
    return "swapping back to back" if pause == 0 else f"swapping every {pause:g} s"


def in_process_reload(state: Path, reg: Registry, name: str, version: str) -> float:
    """Seconds for a fresh pool to load a version (base model included), the second time in this process."""
    from modelcd_assets.lib.policy import load_policy
    from modelcd_assets.serving.pool import ServingPool

    policy_file = Path(os.environ["MODELCD_POLICY_DIR"]) / f"{name}.yaml"
    policy = load_policy(policy_file if policy_file.is_file() else None)
    seconds = []
    for _ in range(2):
        pool = ServingPool(name, reg, state, Path(os.environ["MODELCD_DATA"]), policy.serving, policy.safety.limits())
        seconds.append(pool.load(version).seconds)
    return seconds[-1]

if __name__ == "__main__":
    sys.exit(main())
