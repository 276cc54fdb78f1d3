"""A load generator: classify requests from its own process, a fixed number or until it is stopped, every response recorded."""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import sys
import threading
import time
from pathlib import Path

import httpx

from modelcd_assets.serving import HASH_HEADER


def run_load(url: str, batches: list[list[str]], requests: int, concurrency: int, stop: threading.Event | None = None) -> list[dict]:
    """Closed loop: `concurrency` clients send request i with batch i % len(batches) until `requests` are sent (0: until
    stop is set; each client then finishes the request it is waiting on)."""
    results: dict[int, dict] = {}
    counter = iter(range(requests)) if requests else itertools.count()
    lock = threading.Lock()

    def client() -> None:
        with httpx.Client(base_url=url, timeout=30) as http:
            while not (stop and stop.is_set()):
                with lock:
                    i = next(counter, None)
                if i is None:
                    return
                batch = i % len(batches)
                start = time.perf_counter()
                try:
                    r = http.post("/v1/classify", json={"texts": batches[batch]})
                    body = r.json()
                    result = {
                        "i": i,
                        "batch": batch,
                        "status": r.status_code,
                        "sha": r.headers.get(HASH_HEADER),
                        "start": start,
                        "latency_s": time.perf_counter() - start,
                        "logits": [p["logits"] for p in body.get("predictions", [])],
                        "error": body.get("error"),
                    }
                except httpx.HTTPError as e:
                    result = {
                        "i": i,
                        "batch": batch,
                        "status": 0,
                        "sha": None,
                        "start": start,
                        "latency_s": time.perf_counter() - start,
                        "logits": [],
                        "error": f"{type(e).__name__}: {e}",
                    }
                with lock:
                    results[i] = result

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():  # a timed join, so the main thread runs a signal handler that sets stop
            t.join(0.5)
    return [results[i] for i in sorted(results)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Send classify requests and record every response as JSON.")
    p.add_argument("--url", required=True)
    p.add_argument("--batches", required=True, type=Path, help="JSON file: a list of requests, each a list of texts")
    p.add_argument(
        "--requests", type=int, default=1000, help="how many to send; 0: until SIGTERM or SIGINT, then the answers so far are written"
    )
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args(argv)
    if args.requests < 0:
        p.error(f"--requests must be 0 (until stopped) or more, not {args.requests}")
    batches = json.loads(args.batches.read_text())
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    started = time.time()
    results = run_load(args.url, batches, args.requests, args.concurrency, stop)
    args.out.write_text(json.dumps({"started": started, "finished": time.time(), "results": results}))
    failed = sum(r["status"] != 200 for r in results)
    print(f"{len(results)} requests, {failed} failed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
