"""A rollout on live traffic, on one machine: `modelcd serve` answering a load generator's callers (classify requests, or
chat completions through the OpenAI API), a real Prometheus scraping it, and rollout_sensor judging each step from
Prometheus while its moves run as the daemon runs them, until the candidate is production or its rollout stopped. The demo
rolls its good adapters out with it, and the fault sandbox its live-only faults."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from modelcd_assets.launch import tick_rollouts
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.operations.processes import start_process, stop_process
from modelcd_assets.lib.operations.prometheus_server import PrometheusServer
from modelcd_assets.lib.presentation.rollout_report import rollout_table
from modelcd_assets.lib.release.registry import CandidateRef, Registry
from modelcd_assets.lib.release.rollout import RolloutHistory, read_state
from modelcd_assets.lib.release.rollout_state import RUNNING, RolloutState
from modelcd_assets.serving.loadgen import CHAT, CLASSIFY

CALLERS = 40  # a canary's share is sticky per caller: enough callers that a share of them is near the step's share


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LiveServer:
    """`modelcd serve MODEL` on a free loopback port with Prometheus scraping it every second; load() starts its callers.
    env: the processes' environment over this one's (another state folder, registry and keys: the fault sandbox's). chaos:
    the server takes faults for a version (inject) on its admin API, which only it and this object know the token of."""

    model: str
    folder: Path
    env: dict[str, str] = field(default_factory=dict)
    chaos: bool = False
    url: str = ""
    admin_url: str = ""
    prometheus: PrometheusServer | None = None
    _token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    _server: subprocess.Popen | None = None
    _load: subprocess.Popen | None = None
    _log = None

    def start(self) -> None:
        """Start both; the server loads production in the background (wait_ready)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        port, admin_port = _free_port(), _free_port()
        self.url, self.admin_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
        self._log = open(self.folder / "server.log", "wb")
        flags = ["--admin-port", str(admin_port), *(["--chaos"] if self.chaos else [])]
        self._server = start_process(
            [sys.executable, "-m", "modelcd_assets.cli", "serve", self.model, "--port", str(port), *flags],
            die_with_parent=True,
            env={**os.environ, **self.env, "MODELCD_ADMIN_TOKEN": self._token},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.prometheus = PrometheusServer(self.folder / "prometheus", _free_port(), [f"127.0.0.1:{port}"], scrape_interval="1s").start()

    def wait_ready(self, version: str | None = None, timeout: float = 180) -> float:
        """Wait until the server is ready (and serves `version` as production, when given); the seconds it took."""
        start, deadline = time.perf_counter(), time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._server.poll() is not None:
                raise ModelcdError(
                    f"'modelcd serve {self.model}' exited with code {self._server.returncode}; see {self.folder / 'server.log'}"
                )
            with contextlib.suppress(httpx.HTTPError, ValueError):
                r = httpx.get(f"{self.url}/readyz", timeout=2)
                if r.status_code == 200 and version in (None, r.json().get("version")):
                    return time.perf_counter() - start
            time.sleep(0.2)
        serving = f" serving version {version}" if version else ""
        raise ModelcdError(f"'modelcd serve {self.model}' was not ready{serving} within {timeout:.0f} s; see {self.folder / 'server.log'}")

    def inject(self, version: str, **fault) -> None:
        """The chaos hook: `fault` for every request `version` answers, shadow copies included; its fields are the task's
        server's (a classifier's FaultRequest: latency_ms, error_ratio, nan_ratio; a causal LM's LmFaultRequest: latency_ms,
        error_ratio, ignore_eos), which refuses any other by name."""
        if not self.chaos:
            raise ModelcdError("this server was started without --chaos: it takes no faults")
        r = httpx.post(
            f"{self.admin_url}/v1/admin/faults",
            json={"version": version, **fault},
            headers={"Authorization": f"Bearer {self._token}"},
            timeout=30,
        )
        if r.status_code != 200:
            raise ModelcdError(f"the server refused the fault {fault} for version {version}: {r.status_code} {r.text[:300]}")

    def load(self, api: str, batches: list, concurrency: int = 2) -> None:
        """Callers sending requests back to back from a process of their own, until stop()."""
        if api not in (CLASSIFY, CHAT):
            raise ValueError(f"api {api!r} is neither {CLASSIFY!r} nor {CHAT!r}")
        path = self.folder / "load-batches.json"
        path.write_text(json.dumps(batches))
        self._load = start_process(
            [
                sys.executable,
                "-m",
                "modelcd_assets.serving.loadgen",
                *("--url", self.url, "--api", api, "--batches", str(path), "--requests", "0"),
                *("--concurrency", str(concurrency), "--callers", str(CALLERS), "--out", str(self.folder / "load-answers.json")),
            ],
            die_with_parent=True,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        if self._load is not None:
            stop_process(self._load, timeout=45)  # each caller finishes the request it waits on, then the answers are written
        if self.prometheus is not None:
            self.prometheus.stop()
        if self._server is not None:
            stop_process(self._server)
        if self._log is not None:
            self._log.close()
        self._load = self._server = self.prometheus = self._log = None


@contextlib.contextmanager
def live_server(model: str, folder: Path, env: dict[str, str] | None = None, chaos: bool = False) -> Iterator[LiveServer]:
    live = LiveServer(model, folder, dict(env or {}), chaos)
    try:
        live.start()
        yield live
    finally:
        live.stop()


def follow_rollout(
    reg: Registry,
    ref: CandidateRef,
    live: LiveServer,
    instance=None,
    timeout: float = 240,
    echo: Callable[[str], None] = print,
) -> RolloutState:
    """Tick rollout_sensor against the live server's Prometheus, running each move it asks for on instance (default: this
    process's), until ref's rollout is no longer running; echo each move and the step table. Returns the last state; a
    rollout still running after timeout seconds is an error that says where it stands."""
    import dagster as dg

    instance, cursor = instance or dg.DagsterInstance.get(), None
    deadline = time.monotonic() + timeout
    while True:
        state = read_state(reg, ref.name)
        if state is None or state.version != ref.version:
            raise ModelcdError(f"{ref.uri} is not rolling out ({state.describe() if state else 'no rollout state'})")
        if state.status != RUNNING:
            break
        if time.monotonic() > deadline:
            raise ModelcdError(f"the rollout of {ref.uri} was still running after {timeout:.0f} s: {state.describe()}")
        cursor, moves = tick_rollouts(instance, live.prometheus.url, cursor)
        for move in moves:
            echo(f"  rollout_sensor: {move.action}: {move.status}" + (", production moved" if move.promoted else ""))
        time.sleep(1)
    echo(f"\nrollout of {ref.uri} on live traffic ({state.describe()}):")
    echo(rollout_table(rollout_history(ref)))
    return state


def rollout_history(ref: CandidateRef) -> list[dict]:
    """ref's rollout steps as judged, in the state folder of this process's environment."""
    return RolloutHistory(Path(os.environ["MODELCD_HOME"]), ref.name, ref.version).read()
