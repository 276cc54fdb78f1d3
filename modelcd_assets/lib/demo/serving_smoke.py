"""The demo's closing call to a causal LM's server: `modelcd serve NAME` started on a free loopback port, asked one chat
completion through the OpenAI API, and stopped."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import httpx

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.operations.processes import start_process, stop_process


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
