"""`modelcd serve` answering a steady stream of requests on the same machine, as in production use, while controls are gated."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.operations.processes import start_process, stop_process


@dataclass
class LoadStats:
    requests: int = 0
    errors: int = 0
    failures: list[str] = field(default_factory=list)


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
def serving_under_load(
    env: Mapping[str, str], model: str, texts: list[str], log: Path, concurrency: int = 2, ready_timeout: float = 300
) -> Iterator[LoadStats]:
    """A server for model on a free loopback port, and `concurrency` clients sending batches of 8 texts back to back until
    the block ends. The clients run in a load generator process of their own (serving.loadgen), so their CPU time is not
    charged to the process that gates the controls, whose speed gate times its own CPU (lib/inference/benchmark). The
    stats are filled in when the block ends, from the answers the load generator wrote."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    batches = log.with_name(log.stem + "-batches.json")
    batches.write_text(json.dumps([texts[i : i + 8] for i in range(0, len(texts), 8)] or [["hello"]]))
    answers = log.with_name(log.stem + "-answers.json")
    stats = LoadStats()
    with open(log, "wb") as out:
        proc = start_process(
            [sys.executable, "-m", "modelcd_assets.cli", "serve", model, "--port", str(port), "--workers", "1", "--admin-port", "0"],
            die_with_parent=True,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_ready(url, proc, log, ready_timeout)
            sender = start_process(
                [
                    sys.executable,
                    "-m",
                    "modelcd_assets.serving.loadgen",
                    "--url",
                    url,
                    "--batches",
                    str(batches),
                    "--requests",
                    "0",
                    "--concurrency",
                    str(concurrency),
                    "--out",
                    str(answers),
                ],
                die_with_parent=True,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            try:
                yield stats
            finally:
                # SIGTERM: each client finishes the request it waits on (at most its 30 s timeout), then the answers are written.
                code = stop_process(sender, timeout=45)
                if code != 0 or not answers.is_file():
                    stats.failures.append(f"the load generator exited with {code} without writing its answers; see {log}")
                else:
                    results = json.loads(answers.read_text())["results"]
                    stats.requests, stats.errors = len(results), sum(r["status"] != 200 for r in results)
        finally:
            stop_process(proc)
