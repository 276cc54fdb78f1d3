"""A gated state folder for serving: a tiny base and two adapters that passed every gate (v1, then v2 in production)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from modelcd_assets.launch import PROMOTED, run_gate
from modelcd_assets.lib.operations.processes import stop_process
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets_tests.conftest import Env, make_env

MODEL = "tiny-intent"
ADMIN_TOKEN = "test-admin-token"
# Serving tests need two versions that both pass; the second tiny adapter is ~1 point less accurate,
# so the accuracy tolerance is loosened here, and a throughput verdict left inconclusive by a busy test
# machine does not block (both gates themselves are tested in test_gated_pipeline.py).
POLICY = """\
accuracy:
  absolute_floor: 0.6
  tolerance_points: 5
  alpha: 1.0e-9
quantization:
  variant: dynamic
throughput:
  p99_slo_ms: 250
  on_inconclusive: pass
serving:
  poll_seconds: 0.5
slo:
  p99_latency_ms: 150
  max_error_ratio: 0.05
  window: 20s
  min_samples: 20
  consecutive_failures: 2
"""


@dataclass
class Served:
    env: Env
    instance: dg.DagsterInstance
    v1: CandidateRef
    v2: CandidateRef
    ungated: CandidateRef


def gated_state(root: Path, mp: pytest.MonkeyPatch, tiny_trained: Path, adapters: dict[str, Path]):
    """Yields a Served: v1 and v2 gated and promoted in turn (v2 is production), and a registered, never-gated v3."""
    env = make_env(root / "home", mp)
    env.policy(MODEL, POLICY)
    with dg.instance_for_test(temp_dir=env.env["DAGSTER_HOME"]) as instance:
        env.registry.register(tiny_trained, "tiny-base", role="base")
        refs = []
        for name in ("good", "good2"):
            ref = env.registry.register(adapters[name], MODEL)
            run = run_gate(ref, instance=instance)
            assert run.outcome == PROMOTED, (name, run.error, [(r.gate, r.status, r.reason) for r in run.rows if r.status != "pass"])
            refs.append(ref)
        ungated = env.registry.register(adapters["worse"], MODEL)
        yield Served(env, instance, refs[0], refs[1], ungated)


def gate_blocked(served: Served, adapter: Path) -> CandidateRef:
    """adapter registered and gated, blocked by its accuracy gate: a full build on disk, and no verdict.

    Under the serving policy's loose tolerance even the worse adapter passes; a floor no tiny model reaches fails it."""
    from modelcd_assets.launch import BLOCKED

    ref = served.env.registry.register(adapter, MODEL)
    policy = served.env.policy(MODEL, POLICY.replace("absolute_floor: 0.6", "absolute_floor: 0.99"))
    try:
        run = run_gate(ref, instance=served.instance)
    finally:
        policy.write_text(POLICY)
    assert run.outcome == BLOCKED, (run.outcome, run.error)
    return ref


def samples(metrics_text: str) -> dict[tuple[str, frozenset], float]:
    """A /metrics exposition as {(sample name, its labels): value}."""
    return {(s.name, frozenset(s.labels.items())): s.value for fam in text_string_to_metric_families(metrics_text) for s in fam.samples}


def of_name(metrics: dict, name: str, **labels) -> float:
    """The sum of the series called name whose labels include labels."""
    return sum(v for (n, ls), v in metrics.items() if n == name and set(labels.items()) <= ls)


def wait_for(predicate, what: str, timeout: float = 60) -> None:
    """Poll predicate until it holds; AssertionError naming what did not happen within timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout} s")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`modelcd serve` as a real process on a free loopback port, its admin API on another; flags such as --chaos are passed on."""

    def __init__(self, env: Env, log: Path, *flags: str, admin_port: int | None = None, model: str = MODEL):
        self.port = free_port()
        self.admin_port = admin_port or self.port
        while self.admin_port == self.port:
            self.admin_port = free_port()
        self.url, self.admin_url = f"http://127.0.0.1:{self.port}", f"http://127.0.0.1:{self.admin_port}"
        environ = dict(os.environ, **env.env, MODELCD_ADMIN_TOKEN=ADMIN_TOKEN)
        self.log = open(log, "wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "modelcd_assets.cli",
                "serve",
                model,
                "--port",
                str(self.port),
                "--admin-port",
                str(self.admin_port),
                *flags,
            ],
            env=environ,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, version: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the server exited with {self.proc.returncode}; see {self.log.name}"
            try:
                r = httpx.get(f"{self.url}/readyz", timeout=2)
                if r.status_code == 200 and r.json()["version"] == version:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the server did not serve version {version} within {timeout} s; see {self.log.name}")

    def admin(self, method: str, path: str, **kw) -> httpx.Response:
        return httpx.request(method, f"{self.admin_url}{path}", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=60, **kw)

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()


@contextmanager
def ready_server(env: Env, log: Path, version: str, *flags: str, model: str = MODEL) -> Iterator[ServerProcess]:
    """`modelcd serve` serving version once this yields, stopped however the block ends."""
    proc = ServerProcess(env, log, *flags, model=model)
    try:
        proc.wait_ready(version)
        yield proc
    finally:
        proc.stop()


def openai_client(server: ServerProcess):
    """The official `openai` client of a causal LM's server: no retries, so a refusal is seen as it was answered."""
    import openai

    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=60)


def gated_decoder(env: Env, ref: CandidateRef, adapter: str):
    """A causal-LM version's gated build with its gated adapter file (loaded as adapter), run directly: what the server must
    answer, token for token."""
    from modelcd_assets.lib.causal_lm.decoder import Decoder
    from modelcd_assets.lib.release.candidate import CandidateRecord

    record = CandidateRecord.of(env.home, ref)
    q = record.quantization()
    decoder = Decoder(Path(q["base_build"]) / q["variant"])
    decoder.load_adapter(record.build.dir / q["artifact"], adapter)
    return decoder
