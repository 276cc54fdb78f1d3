"""A bounded load generator: a fixed number of classify requests from its own process, every response recorded."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import httpx

from modelcd_assets.serving import HASH_HEADER


def run_load(url: str, batches: list[list[str]], requests: int, concurrency: int) -> list[dict]:
    """Closed loop: `concurrency` clients send request i with batch i % len(batches) until `requests` are sent."""
    results: list[dict | None] = [None] * requests
    counter = iter(range(requests))
    lock = threading.Lock()

    def client() -> None:
        with httpx.Client(base_url=url, timeout=30) as http:
            while True:
                with lock:
                    i = next(counter, None)
                if i is None:
                    return
                batch = i % len(batches)
                start = time.perf_counter()
                try:
                    r = http.post("/v1/classify", json={"texts": batches[batch]})
                    body = r.json()
                    results[i] = {"i": i, "batch": batch, "status": r.status_code, "sha": r.headers.get(HASH_HEADER),
                                  "start": start, "latency_s": time.perf_counter() - start,
                                  "logits": [p["logits"] for p in body.get("predictions", [])], "error": body.get("error")}
                except httpx.HTTPError as e:
                    results[i] = {"i": i, "batch": batch, "status": 0, "sha": None, "start": start,
                                  "latency_s": time.perf_counter() - start, "logits": [], "error": f"{type(e).__name__}: {e}"}

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for r in results if r is not None]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Send a fixed number of classify requests and record every response as JSON.")
    p.add_argument("--url", required=True)
    p.add_argument("--batches", required=True, type=Path, help="JSON file: a list of requests, each a list of texts")
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args(argv)
    batches = json.loads(args.batches.read_text())
    started = time.time()
    results = run_load(args.url, batches, args.requests, args.concurrency)
    args.out.write_text(json.dumps({"started": started, "finished": time.time(), "results": results}))
    failed = sum(r["status"] != 200 for r in results)
    print(f"{len(results)} requests, {failed} failed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
