"""A load generator: classify requests, or chat completions through the OpenAI API, from its own process, a fixed number or
until it is stopped, every response recorded with the version and the rollout arm that answered it."""

from __future__ import annotations

import argparse
import itertools
import json
import random
import signal
import sys
import threading
import time
from pathlib import Path

import httpx

from modelcd_assets.serving import ARM_HEADER, CALLER_HEADER, HASH_HEADER, VERSION_HEADER

CLASSIFY, CHAT = "classify", "chat"
PATHS = {CLASSIFY: "/v1/classify", CHAT: "/v1/chat/completions"}


def _body(api: str, item, caller: str | None) -> dict:
    """A classify request's body (item: its texts), or a chat completion's (item: the body, e.g. model, messages and
    max_tokens; its `user` is the caller, as OpenAI clients name their end users)."""
    if api == CLASSIFY:
        return {"texts": item}
    return {**item, "user": caller} if caller else dict(item)


def _answer(api: str, body: dict) -> dict:
    if api == CLASSIFY:
        return {"logits": [p["logits"] for p in body.get("predictions", [])]}
    usage = body.get("usage") or {}
    return {"completion_tokens": usage.get("completion_tokens"), "prompt_tokens": usage.get("prompt_tokens")}


def request_plan(requests: int, batches: int, callers: int, seed: int = 0):
    """(i, batch, caller) for each request i, 0 to requests - 1 (requests 0: without end). Request i asks batch
    i % batches; its caller (None when callers is 0) is drawn at random, so every caller asks the same mix of batches. A
    caller tied to i, as i % callers was, asked only the batches congruent to it: 40 callers of 200 prompts asked 5 each,
    and a canary's arm, a set of callers, answered other prompts than production's arm did (its answers' lengths, its
    EOS share, all told apart by prompt, not by version)."""
    pick = random.Random(seed)
    for i in range(requests) if requests else itertools.count():
        yield i, i % batches, f"caller-{pick.randrange(callers)}" if callers else None


def run_load(
    url: str,
    batches: list,
    requests: int,
    concurrency: int,
    stop: threading.Event | None = None,
    api: str = CLASSIFY,
    callers: int = 0,
) -> list[dict]:
    """Closed loop: `concurrency` clients send the requests of request_plan until `requests` are sent (0: until stop is
    set; each client then finishes the request it is waiting on). api: CLASSIFY (a batch is a list of texts) or CHAT (a
    batch is a chat completion's body). callers: each request names one of this many callers (the X-Modelcd-Caller
    header, and OpenAI's `user`), so a canary's share is sticky per caller as it is for real clients; 0: none named."""
    if api not in PATHS:
        raise ValueError(f"api {api!r} is none of {', '.join(PATHS)}")
    if not batches:
        raise ValueError("no batches to send: give the load generator at least one request")
    results: dict[int, dict] = {}
    plan = request_plan(requests, len(batches), callers)
    lock = threading.Lock()

    def client() -> None:
        with httpx.Client(base_url=url, timeout=30) as http:
            while not (stop and stop.is_set()):
                with lock:
                    planned = next(plan, None)
                if planned is None:
                    return
                i, batch, caller = planned
                start = time.perf_counter()
                try:
                    r = http.post(PATHS[api], json=_body(api, batches[batch], caller), headers={CALLER_HEADER: caller} if caller else {})
                    body = r.json()
                    result = {
                        "i": i,
                        "batch": batch,
                        "caller": caller,
                        "status": r.status_code,
                        "sha": r.headers.get(HASH_HEADER),
                        "version": r.headers.get(VERSION_HEADER),
                        "arm": r.headers.get(ARM_HEADER),
                        "start": start,
                        "latency_s": time.perf_counter() - start,
                        **_answer(api, body),
                        "error": body.get("error"),
                    }
                except (httpx.HTTPError, ValueError) as e:  # ValueError: a body that is not JSON
                    result = {
                        "i": i,
                        "batch": batch,
                        "caller": caller,
                        "status": 0,
                        "sha": None,
                        "version": None,
                        "arm": None,
                        "start": start,
                        "latency_s": time.perf_counter() - start,
                        **_answer(api, {}),
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
    p = argparse.ArgumentParser(description="Send classify requests or chat completions and record every response as JSON.")
    p.add_argument("--url", required=True)
    p.add_argument("--api", choices=sorted(PATHS), default=CLASSIFY, help="classify: /v1/classify; chat: /v1/chat/completions")
    p.add_argument(
        "--batches",
        required=True,
        type=Path,
        help="JSON file: a list of requests, each a list of texts (classify) or a chat completion's body (chat)",
    )
    p.add_argument(
        "--callers",
        type=int,
        default=0,
        help="name one of this many callers on each request, at random (a canary is sticky per caller); 0: none",
    )
    p.add_argument(
        "--requests", type=int, default=1000, help="how many to send; 0: until SIGTERM or SIGINT, then the answers so far are written"
    )
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args(argv)
    if args.requests < 0:
        p.error(f"--requests must be 0 (until stopped) or more, not {args.requests}")
    if args.callers < 0:
        p.error(f"--callers must be 0 (none named) or more, not {args.callers}")
    batches = json.loads(args.batches.read_text())
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    started = time.time()
    results = run_load(args.url, batches, args.requests, args.concurrency, stop, args.api, args.callers)
    args.out.write_text(json.dumps({"started": started, "finished": time.time(), "results": results}))
    failed = sum(r["status"] != 200 for r in results)
    print(f"{len(results)} requests, {failed} failed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
