"""`modelcd up` started as a background job would be, with SIGINT ignored: it serves, Prometheus scrapes it and the
Dagster UI answers; then one SIGINT or one SIGTERM stops it, with every process it started, within 20 s."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from modelcd_assets.lib.operations.processes import descendants, processes
from modelcd_assets_tests.process_leaks import cmdline
from modelcd_assets_tests.serving.conftest import MODEL, free_port, gated_state

pytestmark = pytest.mark.slow
STOP_WITHIN = 20.0


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_trained, tiny_adapters):
    mp = pytest.MonkeyPatch()
    yield from gated_state(tmp_path_factory.mktemp("stack"), mp, tiny_trained, tiny_adapters)
    mp.undo()


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a non-interactive shell does to `cmd &`


def answers(url: str, check) -> bool:
    try:
        return check(httpx.get(url, timeout=2))
    except httpx.HTTPError:
        return False


def scraping(r: httpx.Response) -> bool:
    if r.status_code != 200:  # Prometheus answers 503 with plain text until its storage is ready
        return False
    targets = r.json()["data"]["activeTargets"]
    return bool(targets) and all(t["health"] == "up" for t in targets)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_modelcd_up_in_the_background_stops_with_all_it_started_on_one_signal(served, tmp_path, sig):
    serve, prom, ui = free_port(), free_port(), free_port()
    env = dict(os.environ, **served.env.env)
    with open(tmp_path / "up.log", "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "modelcd_assets.cli",
                "up",
                MODEL,
                "--port",
                str(serve),
                "--prometheus-port",
                str(prom),
                "--ui-port",
                str(ui),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=ignore_sigint,
        )
    tree = []
    try:
        deadline = time.monotonic() + 180
        wanted = {
            "serving": (f"http://127.0.0.1:{serve}/readyz", lambda r: r.status_code == 200),
            "prometheus scraping it": (f"http://127.0.0.1:{prom}/api/v1/targets", scraping),
            "dagster UI": (f"http://127.0.0.1:{ui}/server_info", lambda r: r.status_code == 200),
        }
        while wanted and time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "up.log").read_text()[-2000:]
            wanted = {k: v for k, v in wanted.items() if not answers(*v)}
            time.sleep(1)
        assert not wanted, f"not up after 180 s: {sorted(wanted)}; log: {(tmp_path / 'up.log').read_text()[-2000:]}"
        tree = descendants(proc.pid)
        commands = {info.pid: cmdline(info.pid) for info in tree}
        # serve, Prometheus and dagster dev, and dagster dev's own children: the webserver and the daemon at least
        assert sum(info.ppid == proc.pid for info in tree) == 3 and len(tree) >= 5, commands

        start = time.monotonic()
        proc.send_signal(sig)
        code = proc.wait(STOP_WITHIN)
        table = processes()
        left = [f"{info.pid}: {commands[info.pid]}" for info in tree if info.pid in table and table[info.pid].started == info.started]
        took = time.monotonic() - start
        print(f"modelcd up stopped on {sig.name} in {took:.1f} s, with {len(tree)} descendants")
        assert code == 0 and not left and took < STOP_WITHIN, (code, left, took, (tmp_path / "up.log").read_text()[-2000:])
    finally:  # whatever a failure left behind
        table = processes()
        for info in tree + descendants(proc.pid, table):
            if info.pid in table and table[info.pid].started == info.started:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(info.pid, signal.SIGKILL)
        proc.kill()
        proc.wait()
    for port in (serve, prom, ui):  # nothing is left listening
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
