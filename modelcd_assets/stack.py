"""`modelcd up`: the serving process, Prometheus scraping it, and the Dagster UI and daemon, all on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.processes import stop_process
from modelcd_assets.lib.registry import Registry
from modelcd_assets.lib.prometheus_server import PrometheusServer


def run_stack(model: str, serve_port: int, prometheus_port: int, ui_port: int) -> int:
    """Runs until Ctrl-C or until one part exits; then stops the others."""
    workspace = Path(__file__).resolve().parents[1] / "workspace.yaml"
    if not workspace.is_file():
        raise ModelcdError(f"{workspace} not found; run 'modelcd up' from an editable install of the repository (make install)")
    Registry.from_env().require_candidate_model(model)  # before anything starts
    env = dict(os.environ, MODELCD_PROMETHEUS_URL=f"http://127.0.0.1:{prometheus_port}")
    prometheus = PrometheusServer(Path(env["MODELCD_HOME"]) / "prometheus", prometheus_port, [f"127.0.0.1:{serve_port}"]).start()
    children = {
        "serve": subprocess.Popen([sys.executable, "-m", "modelcd_assets.cli", "serve", model, "--port", str(serve_port)], env=env),
        "dagster": subprocess.Popen([str(Path(sys.executable).with_name("dagster")), "dev", "-w", str(workspace), "-h", "127.0.0.1", "-p", str(ui_port)], env=env),
    }
    print(f"serving {model} on http://127.0.0.1:{serve_port} (POST /v1/classify, /metrics, /readyz)\n"
          f"Prometheus on {prometheus.url}\nDagster UI and daemon on http://127.0.0.1:{ui_port} (registry_sensor, slo_sensor)\nCtrl-C stops everything.",
          flush=True)
    code = 0
    try:
        while True:
            for name, proc in children.items():
                if proc.poll() is not None:
                    print(f"modelcd up: {name} exited with code {proc.returncode}; stopping the rest", file=sys.stderr)
                    code = proc.returncode or 1
                    raise KeyboardInterrupt
            if prometheus.process is None or prometheus.process.poll() is not None:
                print("modelcd up: Prometheus exited; stopping the rest", file=sys.stderr)
                code = 1
                raise KeyboardInterrupt
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        for proc in children.values():
            if proc.poll() is None:
                proc.terminate()  # both at once, so they wind down together
        for proc in children.values():
            stop_process(proc)
        prometheus.stop()
    return code
