"""A closed-loop load generator for the serving bench: requests/s and latency percentiles over a fixed window.

    python bench/closed_loop.py URL --concurrency 8 --duration 5

URL is a server's base URL; requests go to URL/v1/classify. Each of `concurrency` client threads sends its next
request as soon as the previous one answers. A request is counted when it completes inside the measured window
(after the warmup); the one still in flight at the end is dropped. Errors (a non-200 answer or an exception) are
counted apart and left out of the latencies and the rates. The clients share one process and its GIL, so at high
concurrency on few cores they compete with the server for CPU: compare servers under the same generator.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from modelcd_assets.lib.splits import split_path

EVALUATION = split_path(Path(os.environ.get("MODELCD_DATA", ".modelcd/data")), "evaluation")
METRICS = ("requests", "errors", "requests_per_s", "texts_per_s", "p50_ms", "p90_ms", "p99_ms")


def measure(url: str, texts: list[str], concurrency: int, duration_s: float, texts_per_request: int = 1, warmup_s: float = 1.0) -> dict:
    """Closed-loop load on url for warmup_s + duration_s; rates and latency percentiles of the last duration_s."""
    if not texts or concurrency < 1 or duration_s <= 0:
        raise ValueError("measure needs texts, concurrency >= 1 and duration_s > 0")
    n = len(texts)
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    errors = [0] * concurrency
    ready = threading.Barrier(concurrency + 1)
    window: list[float] = []  # [measured-window start, end], set once every client is connected and waiting

    def client(c: int) -> None:
        offset = c * (n // concurrency)  # clients start at different places in texts, so they send different texts
        with httpx.Client(base_url=url, timeout=60) as http:
            ready.wait()
            start_at, end_at = window
            i = 0
            while (sent := time.perf_counter()) < end_at:
                first = offset + i * texts_per_request
                batch = [texts[(first + k) % n] for k in range(texts_per_request)]
                i += 1
                try:
                    ok = http.post("/v1/classify", json={"texts": batch}).status_code == 200
                except httpx.HTTPError:
                    ok = False
                done = time.perf_counter()
                if start_at <= done <= end_at:
                    if ok:
                        latencies[c].append(done - sent)
                    else:
                        errors[c] += 1

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(concurrency)]
    for t in threads:
        t.start()
    now = time.perf_counter()
    window.extend([now + warmup_s, now + warmup_s + duration_s])
    ready.wait()
    for t in threads:
        t.join()
    ms = np.asarray([x for per_client in latencies for x in per_client]) * 1000
    ok = len(ms)

    def pct(q: float) -> float | None:
        return float(np.percentile(ms, q)) if ok else None

    return {
        "concurrency": concurrency,
        "requests": ok,
        "errors": sum(errors),
        "requests_per_s": ok / duration_s,
        "texts_per_s": ok * texts_per_request / duration_s,
        "p50_ms": pct(50),
        "p90_ms": pct(90),
        "p99_ms": pct(99),
        "duration_s": duration_s,
    }


def interleaved(
    urls: dict[str, str], texts: list[str], concurrencies=(1, 8, 32), rounds: int = 3, duration_s: float = 8.0, texts_per_request: int = 1
) -> dict:
    """{name: {concurrency: {"median": ..., "rounds": [...]}}}: each server loaded alone, in A B, B A, ... order per round."""
    names = list(urls)
    raw: dict[str, dict[int, list[dict]]] = {name: {c: [] for c in concurrencies} for name in names}
    for c in concurrencies:
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                raw[name][c].append(measure(urls[name], texts, c, duration_s, texts_per_request))
    out: dict[str, dict[int, dict]] = {}
    for name in names:
        out[name] = {}
        for c, runs in raw[name].items():
            median = {"concurrency": c, "duration_s": duration_s}
            for key in METRICS:
                values = [run[key] for run in runs if run[key] is not None]
                median[key] = statistics.median(values) if values else None
            out[name][c] = {"median": median, "rounds": runs}
    return out


def read_texts(path: Path = EVALUATION) -> list[str]:
    """The "text" field of every line of a JSON-lines file."""
    return [json.loads(line)["text"] for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    p = argparse.ArgumentParser(description="Closed-loop load on a classify server; prints requests/s and latency percentiles as JSON.")
    p.add_argument("url", help="the server's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--duration", type=float, default=5.0, help="seconds measured, after the warmup")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--texts-per-request", type=int, default=1)
    p.add_argument("--texts", type=Path, default=EVALUATION, help="JSON lines with a 'text' field")
    args = p.parse_args()
    result = measure(args.url, read_texts(args.texts), args.concurrency, args.duration, args.texts_per_request, args.warmup)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
