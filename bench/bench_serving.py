"""Serving: modelcd's server against a hand-written one, and p99 and failures while versions are swapped.

Run after `make demo`: python bench/bench_serving.py   (make bench-serving)
Everything is measured in this one run, side by side, on the demo's production version:
  1. served throughput and latency at concurrency 1, 8 and 32, one evaluation text per request, closed loop:
     `modelcd serve` (the gated INT8 artifact on ONNX Runtime, micro-batched) against bench/baseline_server.py
     (what a user writes by hand: transformers + peft, adapter merged, PyTorch eager FP32, padded to the longest
     text of each request), each loaded alone, in alternating order (A B, B A, ...);
  2. swaps: p99 while production and the demo's other adapter are swapped once a second, against steady
     phases in between, failed requests over every phase, and swap time against restart-to-ready;
  3. memory: resident size of a process holding 1, 10 and 50 loaded versions (sessions over the gated artifact).
Writes bench/results/serving.json; docs/benchmarks.md's serving tables are rendered from it (bench/render_docs.py).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
from closed_loop import interleaved, measure
from machine import machine

from modelcd_assets.launch import PROMOTED, run_gate
from modelcd_assets.lib.operations.processes import stop_process
from modelcd_assets.lib.operations.settings import apply_local_defaults
from modelcd_assets.lib.release import servable
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import CandidateRef, Registry
from modelcd_assets.lib.splits import read_split, split_path

TOKEN = "bench-admin-token"
RESULTS = Path(__file__).parent / "results" / "serving.json"
TARGETS = {"throughput_ratio": {"1": 2.0, "32": 4.0}, "p99_ratio": 0.5, "swap_p99_ratio": 1.2, "swap_vs_restart": 0.1}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(
    cmd: list[str], port: int, log: Path, env: dict | None = None, ready_path: str = "/readyz", deadline_s: float = 900.0
) -> tuple[subprocess.Popen, float]:
    """A server process; returns it and the seconds from spawn to ready (ready_path answers 200). The bench ends, with
    the server's reason, when the server refuses the version it was to serve or is not ready within deadline_s."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT)
    name, reason = cmd[2] if len(cmd) > 2 else cmd[0], "no answer yet"
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited with {proc.returncode}; see {log}")
        try:
            answer = httpx.get(f"http://127.0.0.1:{port}{ready_path}", timeout=2)
            if answer.status_code == 200:
                return proc, time.perf_counter() - started
            reason = _not_ready_reason(answer)
        except httpx.HTTPError as e:
            reason = f"{type(e).__name__}: {e}"
        if "was refused" in reason or time.perf_counter() - started > deadline_s:
            proc.kill()
            proc.wait()
            raise SystemExit(f"{name} was not ready after {time.perf_counter() - started:.0f} s: {reason}; see {log}")
        time.sleep(0.05)


def _not_ready_reason(answer: httpx.Response) -> str:
    try:
        body = answer.json()
    except ValueError:
        return answer.text[:300]
    return str(body.get("reason", body)) if isinstance(body, dict) else answer.text[:300]


def start_modelcd(name: str, port: int, log: Path, admin_port: int = 0) -> tuple[subprocess.Popen, float]:
    """`modelcd serve` on port; its admin API on admin_port (0: none)."""
    return start(
        [sys.executable, "-m", "modelcd_assets.cli", "serve", name, "--port", str(port), "--admin-port", str(admin_port)],
        port,
        log,
        dict(os.environ, MODELCD_ADMIN_TOKEN=TOKEN),
    )


def pick_versions(reg: Registry, state: Path, name: str) -> tuple[CandidateRecord, str]:
    """Production's record, and the newest other version the server may serve (a valid verdict over its bytes) to swap to.

    The demo's only other adapter is blocked by its gates, so it may not be served; with no other servable version, a
    byte-identical copy of production is registered and gated (promoted: the copy becomes production, and the version
    it replaced, verdict intact, is the one swapped to). A swap costs the same whichever bytes it verifies and probes."""
    prod = reg.production(name)
    if prod is None:
        raise SystemExit(f"no production version of {name}; run 'make demo' first")
    for ref in reversed(reg.versions(name)):
        if ref != prod and not servable.reason(reg, state, ref):
            return CandidateRecord.of(state, CandidateRef(name, prod.version)), ref.version
    record = CandidateRecord.of(state, CandidateRef(name, prod.version))
    copy = reg.register(Path(record.artifact_dir), name, base=record.base_uri)
    run = run_gate(copy)
    if run.outcome != PROMOTED:
        raise SystemExit(
            f"a byte-identical copy of production {prod.uri} was not promoted ({run.outcome}: {run.error}); nothing servable to swap to"
        )
    return CandidateRecord.of(state, CandidateRef(name, copy.version)), prod.version


def served_vs_baseline(record: CandidateRecord, name: str, texts: list[str], tmp: Path, rounds: int, seconds: float) -> dict:
    port_m, port_b = free_port(), free_port()
    modelcd, _ = start_modelcd(name, port_m, tmp / "modelcd.log")
    baseline, _ = start(
        [
            sys.executable,
            str(Path(__file__).parent / "baseline_server.py"),
            "--base",
            str(record.base_dir),
            "--adapter",
            str(record.artifact_dir),
            "--port",
            str(port_b),
        ],
        port_b,
        tmp / "baseline.log",
    )
    urls = {"modelcd": f"http://127.0.0.1:{port_m}", "baseline": f"http://127.0.0.1:{port_b}"}
    try:
        # Both serve the same model: top-1 agreement on the first 64 texts (INT8 against FP32).
        labels = {
            k: [p["label"] for p in httpx.post(f"{u}/v1/classify", json={"texts": texts[:64]}, timeout=60).json()["predictions"]]
            for k, u in urls.items()
        }
        agreement = float(np.mean([a == b for a, b in zip(labels["modelcd"], labels["baseline"])]))
        runs = interleaved(urls, texts, (1, 8, 32), rounds=rounds, duration_s=seconds)
    finally:
        stop_process(modelcd)
        stop_process(baseline)
    table = {k: {str(c): runs[k][c]["median"] for c in runs[k]} for k in runs}
    return {
        "top1_agreement_modelcd_vs_baseline": agreement,
        "throughput_ratio_vs_baseline": {
            c: table["modelcd"][c]["requests_per_s"] / table["baseline"][c]["requests_per_s"] for c in table["modelcd"]
        },
        "p99_ratio_vs_baseline": {c: table["modelcd"][c]["p99_ms"] / table["baseline"][c]["p99_ms"] for c in table["modelcd"]},
        "medians": table,
        "raw_rounds": {k: {str(c): runs[k][c]["rounds"] for c in runs[k]} for k in runs},
    }


def swaps(name: str, prod: str, other: str, texts: list[str], tmp: Path, rounds: int, seconds: float, restarts: int) -> dict:
    port, admin_port = free_port(), free_port()
    url, admin_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
    admin = {"Authorization": f"Bearer {TOKEN}"}
    proc, _ = start_modelcd(name, port, tmp / "modelcd-swaps.log", admin_port)
    steady, swapping, swap_seconds, swap_steps = [], [], [], []
    try:
        for _ in range(rounds):
            steady.append(measure(url, texts, 8, seconds))
            done = threading.Event()

            def swapper() -> None:
                with httpx.Client(base_url=admin_url, headers=admin, timeout=120) as http:
                    while not done.is_set():
                        target = other if len(swap_seconds) % 2 == 0 else prod
                        resp = http.post("/v1/admin/adapters", json={"version": target})
                        resp.raise_for_status()
                        swap_seconds.append(resp.json()["loaded"]["seconds"])
                        swap_steps.append(resp.json()["loaded"]["steps"])
                        done.wait(1.0)

            t = threading.Thread(target=swapper)
            t.start()
            swapping.append(measure(url, texts, 8, seconds))
            done.set()
            t.join()
    finally:
        stop_process(proc)
    restart_s = []
    for _ in range(restarts):
        proc, spawn_to_ready = start_modelcd(name, port, tmp / "modelcd-restarts.log")
        stop_process(proc)
        restart_s.append(spawn_to_ready)
    p99 = lambda runs: statistics.median(r["p99_ms"] for r in runs)  # noqa: E731
    return {
        "concurrency": 8,
        "swaps": len(swap_seconds),
        "requests": sum(r["requests"] for r in steady + swapping),
        "failed_requests": sum(r["errors"] for r in steady + swapping),
        "steady_p99_ms": p99(steady),
        "swapping_p99_ms": p99(swapping),
        "swap_p99_ratio": p99(swapping) / p99(steady),
        "swap_seconds_median": statistics.median(swap_seconds),
        "restart_to_ready_seconds_median": statistics.median(restart_s),
        "swap_vs_restart": statistics.median(swap_seconds) / statistics.median(restart_s),
        "swap_step_seconds_median": {k: statistics.median(s[k] for s in swap_steps) for k in swap_steps[0]},
        "phases": {"steady": steady, "swapping": swapping},
        "swap_seconds": swap_seconds,
        "restart_seconds": restart_s,
    }


MEMORY_SCRIPT = """
import json, sys
from pathlib import Path
from modelcd_assets.serving.classifier.engine import Engine
def rss_mb():
    return next(int(l.split()[1]) for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmRSS")) / 1024
artifact, merged, counts = Path(sys.argv[1]), Path(sys.argv[2]), [int(c) for c in sys.argv[3].split(",")]
engines, out = [], {"0": rss_mb()}
for n in range(1, max(counts) + 1):
    engines.append(Engine(artifact, merged))
    engines[-1].logits(["warm the session up"])
    if n in counts:
        out[str(n)] = rss_mb()
print(json.dumps(out))
"""


def memory(record: CandidateRecord, counts=(1, 10, 50)) -> dict:
    """Resident memory of a process holding N loaded versions (N sessions over the gated artifact, as the pool holds them)."""
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(record.chosen_int8()), str(record.build.merged), ",".join(map(str, counts))],
        capture_output=True,
        text=True,
        check=True,
    )
    rss = json.loads(done.stdout.strip().splitlines()[-1])
    first = counts[0]
    return {
        "rss_mb": rss,
        "mb_per_version": {str(n): (rss[str(n)] - rss["0"]) / n for n in counts},
        "marginal_mb_per_version": (rss[str(counts[-1])] - rss[str(first)]) / (counts[-1] - first),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="ticket-intent")
    ap.add_argument(
        "--rounds", type=int, default=3, help="rounds per concurrency (servers alternate within each) and swap/steady phase pairs"
    )
    ap.add_argument("--seconds", type=float, default=8.0, help="measured seconds per phase, after a 1 s warmup")
    ap.add_argument("--restarts", type=int, default=3, help="process restarts timed for restart-to-ready")
    args = ap.parse_args()
    env = apply_local_defaults()
    state = Path(env["MODELCD_HOME"])
    reg = Registry.from_env()
    record, other = pick_versions(reg, state, args.name)
    texts = [ex.text for ex in read_split(split_path(Path(env["MODELCD_DATA"]), "evaluation"))]
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-serving-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    print(
        f"{args.name}: production {record.version} ({record.quantization()['chosen']} INT8), swapping with {other}; logs in {tmp}",
        flush=True,
    )

    served = served_vs_baseline(record, args.name, texts, tmp, args.rounds, args.seconds)
    for c in ("1", "8", "32"):
        m, b = served["medians"]["modelcd"][c], served["medians"]["baseline"][c]
        print(
            f"concurrency {c:>2}: modelcd {m['requests_per_s']:7.1f} req/s p50 {m['p50_ms']:6.1f} p99 {m['p99_ms']:6.1f} ms | baseline"
            f" {b['requests_per_s']:7.1f} req/s p50 {b['p50_ms']:6.1f} p99 {b['p99_ms']:6.1f} ms | throughput"
            f" x{served['throughput_ratio_vs_baseline'][c]:.2f}, p99 x{served['p99_ratio_vs_baseline'][c]:.2f}",
            flush=True,
        )
    swap = swaps(args.name, record.version, other, texts, tmp, args.rounds, args.seconds, args.restarts)
    print(
        f"swaps: {swap['swaps']} under load, {swap['failed_requests']} of {swap['requests']} requests failed; p99 swapping once a second"
        f" {swap['swapping_p99_ms']:.1f} ms vs steady {swap['steady_p99_ms']:.1f} ms (x{swap['swap_p99_ratio']:.2f}); swap"
        f" {swap['swap_seconds_median'] * 1000:.0f} ms vs restart-to-ready {swap['restart_to_ready_seconds_median']:.2f} s"
        f" (x{swap['swap_vs_restart']:.3f})"
    )
    mem = memory(record)
    print(
        f"memory: {', '.join(f'{n} loaded {mb:.0f} MB' for n, mb in mem['rss_mb'].items())}; {mem['marginal_mb_per_version']:.1f} MB per"
        " further version"
    )
    result = {
        "machine": machine(),
        "model": f"{args.name} v{record.version}",
        "variant": record.quantization()["chosen"],
        "artifact_sha256": record.quantization()["artifact_sha256"],
        "targets": TARGETS,
        "rounds_per_concurrency": args.rounds,
        "seconds_per_phase": args.seconds,
        **served,
        "swaps": swap,
        "memory": mem,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0 if swap["failed_requests"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
