"""`modelcd up`: the serving process, Prometheus scraping it, and the Dagster UI and daemon, all on loopback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.operations.processes import start_process, stop_processes
from modelcd_assets.lib.operations.prometheus_server import PrometheusServer
from modelcd_assets.lib.release.registry import Registry

STOP_TIMEOUT = 10.0  # then SIGKILL: `up` is gone within 20 s of a stop signal, even on a loaded machine


def run_stack(models: list[str], serve_port: int, prometheus_port: int, ui_port: int, required: bool = True) -> int:
    """Runs until SIGINT, SIGTERM or SIGHUP, or until one part exits; then stops them all, their children included.

    One `modelcd serve` process per model (a classifier's or a causal LM's server, by the task its versions record), the
    i-th on serve_port + 2i with its admin API on the port after it. required=False: models not registered are skipped."""
    workspace = Path(__file__).resolve().parents[1] / "workspace.yaml"
    if not workspace.is_file():
        raise ModelcdError(f"{workspace} not found; run 'modelcd up' from an editable install of the repository (make install)")
    registry = Registry.from_env()
    if not required:
        known = set(registry.candidate_models())
        for model in [m for m in models if m not in known]:
            print(
                f"modelcd up: {model} is not registered; not served ('make demo' registers the demo's models)", file=sys.stderr, flush=True
            )
        models = [m for m in models if m in known]
    if not models:
        raise ModelcdError("no model to serve: none of the demo's models is registered; run 'make demo', or name the models to serve")
    for model in models:
        registry.require_candidate_model(model)  # before anything starts
    ports = {model: serve_port + 2 * i for i, model in enumerate(models)}
    env = dict(os.environ, MODELCD_PROMETHEUS_URL=f"http://127.0.0.1:{prometheus_port}")
    stopping = False

    def on_signal(signum: int, _frame) -> None:
        nonlocal stopping
        if not stopping:  # a second signal must not cut the shutdown short
            stopping = True
            raise KeyboardInterrupt(signal.Signals(signum).name)

    # Explicit handlers for SIGINT and SIGTERM, also over a SIG_IGN inherited from a background start, where
    # Python raises no KeyboardInterrupt; SIGHUP too, unless nohup asked to ignore it. Each child runs in a
    # session of its own, out of reach of the terminal's Ctrl-C: this process stops them all.
    stop_signals = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN else [])
    previous = {sig: signal.signal(sig, on_signal) for sig in stop_signals}
    prometheus = PrometheusServer(
        Path(env["MODELCD_HOME"]) / "prometheus", prometheus_port, [f"127.0.0.1:{port}" for port in ports.values()]
    )
    children: dict[str, subprocess.Popen] = {}
    code = 0
    try:
        prometheus.start()
        # die_with_parent, so that a SIGKILLed `up` leaves nothing behind: it reaches only these direct children,
        # and dagster dev, on that SIGTERM, stops the webserver, daemon and code server it started.
        for model, port in ports.items():
            children[f"serve {model}"] = start_process(
                [sys.executable, "-m", "modelcd_assets.cli", "serve", model, "--port", str(port), "--admin-port", str(port + 1)],
                die_with_parent=True,
                env=env,
            )
        children["dagster"] = start_process(
            [str(Path(sys.executable).with_name("dagster")), "dev", "-w", str(workspace), "-h", "127.0.0.1", "-p", str(ui_port)],
            die_with_parent=True,
            env=env,
        )
        children["prometheus"] = prometheus.process
        served = "\n".join(
            f"serving {model} on http://127.0.0.1:{port} ({_api(registry, model)}, /metrics, /readyz)" for model, port in ports.items()
        )
        print(
            f"{served}\nPrometheus on {prometheus.url}\nDagster UI and daemon on http://127.0.0.1:{ui_port} (registry_sensor,"
            " trigger_sensor, rollout_sensor)\nCtrl-C stops everything.",
            flush=True,
        )
        while not stopping:
            for name, proc in children.items():
                if proc.poll() is not None:
                    stopping = True
                    print(f"modelcd up: {name} exited with code {proc.returncode}; stopping the rest", file=sys.stderr, flush=True)
                    code = proc.returncode or 1
                    break
            else:
                time.sleep(1)
    except KeyboardInterrupt as stop:
        print(f"modelcd up: {str(stop) or 'interrupted'}; stopping everything", file=sys.stderr, flush=True)
    finally:
        stopping = True
        running = [name for name, proc in children.items() if proc.poll() is None]
        codes = dict(
            zip(children, stop_processes(list(children.values()), timeout=STOP_TIMEOUT))
        )  # all at once, so they wind down together
        if killed := [name for name in running if codes[name] == -signal.SIGKILL]:
            print(f"modelcd up: {', '.join(killed)} did not stop within {STOP_TIMEOUT:.0f} s; killed", file=sys.stderr, flush=True)
        prometheus.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


def _api(registry: Registry, model: str) -> str:
    from modelcd_assets.lib.tasks.names import declaration_of
    from modelcd_assets.serving.server import task_of_model

    return declaration_of(task_of_model(registry, model)).server_api
