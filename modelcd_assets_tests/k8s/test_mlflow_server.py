"""The MLflow server command of manifests/mlflow.yaml starts here and accepts the Service's host name, and only that."""

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from modelcd_assets.lib.processes import start_process, stop_process
from modelcd_assets_tests.k8s.files import manifest
from modelcd_assets_tests.serving.conftest import free_port

CONTAINER = manifest("Deployment", "modelcd-mlflow")["spec"]["template"]["spec"]["containers"][0]
HOME = manifest("ConfigMap", "modelcd-env")["data"]["MODELCD_HOME"]
STARTUP_TIMEOUT = 180


def status(port: int, path: str, host: str) -> int | None:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def test_mlflow_command_serves_the_service_host_and_refuses_others(tmp_path):
    port = free_port()
    # The manifest's command with this environment's mlflow, on loopback and a free port, its volume under tmp_path.
    argv = [str(Path(sys.executable).with_name("mlflow"))]
    for arg in CONTAINER["command"][1:]:
        if arg.startswith("--host="):
            arg = "--host=127.0.0.1"
        elif arg.startswith("--port="):
            arg = f"--port={port}"
        argv.append(arg.replace(HOME, str(tmp_path / "state")))
    env = {**os.environ, "MLFLOW_BACKEND_STORE_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    log = tmp_path / "mlflow.log"
    with open(log, "wb") as out:
        server = start_process(argv, env=env, stdout=out, stderr=subprocess.STDOUT, die_with_parent=True)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while status(port, "/health", "kubelet") != 200:  # /health is exempt from the host check, as the probes need
            if server.poll() is not None:
                pytest.fail(f"mlflow server exited with {server.returncode}:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow server not healthy within {STARTUP_TIMEOUT} s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        search = "/api/2.0/mlflow/experiments/search?max_results=1"
        service_port = manifest("Service", "modelcd-mlflow")["spec"]["ports"][0]["port"]
        assert status(port, search, f"modelcd-mlflow:{service_port}") == 200
        assert status(port, search, f"modelcd-mlflow.modelcd.svc.cluster.local:{service_port}") == 200
        assert status(port, search, f"attacker.example:{service_port}") == 403
    finally:
        stop_process(server, timeout=30)
