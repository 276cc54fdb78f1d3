"""`modelcd serve` answering a steady stream of requests on the same machine, as in production use, while controls are gated."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.operations.processes import start_process, stop_process
from modelcd_assets.serving.loadgen import run_load


@dataclass
class LoadStats:
    requests: int = 0
    errors: int = 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ModelcdError(f"the server under load exited with {proc.returncode}; see {log}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise ModelcdError(f"the server under load was not ready within {timeout:.0f} s; see {log}")


@contextlib.contextmanager
def serving_under_load(env: Mapping[str, str], model: str, texts: list[str], log: Path, concurrency: int = 2,
                       ready_timeout: float = 300) -> Iterator[LoadStats]:
    """A server for model on a free loopback port, and `concurrency` clients sending batches of 8 texts back to back."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    batches = [texts[i : i + 8] for i in range(0, len(texts), 8)] or [["hello"]]
    stats, stop = LoadStats(), threading.Event()

    def drive() -> None:
        while not stop.is_set():
            results = run_load(url, batches, 4 * concurrency, concurrency)
            stats.requests += len(results)
            stats.errors += sum(r["status"] != 200 for r in results)

    with open(log, "wb") as out:
        proc = start_process([sys.executable, "-m", "modelcd_assets.cli", "serve", model, "--port", str(port), "--workers", "1", "--admin-port", "0"],
                             die_with_parent=True, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait_ready(url, proc, log, ready_timeout)
            sender = threading.Thread(target=drive, name="fault-sandbox-load", daemon=True)
            sender.start()
            try:
                yield stats
            finally:
                stop.set()
                sender.join()
        finally:
            stop_process(proc)
