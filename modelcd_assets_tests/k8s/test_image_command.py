"""The image's CMD, run here as it runs in the code server pod, loads the definitions and answers gRPC health checks."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from modelcd_assets.lib.operations.processes import start_process, stop_process
from modelcd_assets.lib.operations.settings import apply_local_defaults, local_defaults
from modelcd_assets_tests.k8s.files import DOCKERFILE, dockerfile_instructions, exec_form
from modelcd_assets_tests.serving.conftest import free_port

INSTRUCTIONS = dockerfile_instructions(DOCKERFILE.read_text())
STARTUP_TIMEOUT = 240  # importing torch and the definitions on a slow, busy machine


def image_cmd() -> list[str]:
    (cmd,) = [args for instruction, args in INSTRUCTIONS if instruction == "CMD"]
    return exec_form(cmd)


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_image_has_no_entrypoint_so_pod_args_replace_the_cmd():
    assert "ENTRYPOINT" not in [instruction for instruction, _ in INSTRUCTIONS]


def test_image_cmd_serves_the_definitions_module_over_grpc_on_all_interfaces():
    argv = image_cmd()
    assert argv[:3] == ["dagster", "api", "grpc"]
    assert flag(argv, "-m") == "modelcd_assets.definitions"
    assert (flag(argv, "-h"), flag(argv, "-p")) == ("0.0.0.0", "3030")


def test_image_runs_as_a_non_root_user():
    users = [args for instruction, args in INSTRUCTIONS if instruction == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")


def health_check(dagster: str, port: int, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([dagster, "api", "grpc-health-check", "-p", str(port)], env=env, capture_output=True, text=True, timeout=60)


def test_image_cmd_starts_here_and_answers_grpc_health_checks(tmp_path):
    port = free_port()
    argv = image_cmd()
    # This environment's dagster, on loopback and a free port; everything else as the image runs it.
    dagster = str(Path(sys.executable).with_name("dagster"))
    argv = [dagster, *argv[1:]]
    argv[argv.index("-h") + 1], argv[argv.index("-p") + 1] = "127.0.0.1", str(port)
    env = {**os.environ, **local_defaults(tmp_path / "home")}
    apply_local_defaults(env)  # the state folders and the instance's dagster.yaml
    log = tmp_path / "code-server.log"
    with open(log, "wb") as out:
        server = start_process(argv, env=env, stdout=out, stderr=subprocess.STDOUT, die_with_parent=True)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while (check := health_check(dagster, port, env)).returncode != 0:
            if server.poll() is not None:
                pytest.fail(f"the code server exited with {server.returncode} before answering:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"no healthy answer within {STARTUP_TIMEOUT} s ({check.stderr.strip()}):\n{log.read_text()[-3000:]}")
            time.sleep(1)
        assert server.poll() is None
    finally:
        code = stop_process(server, timeout=30)
    assert code == 0, f"the code server did not stop cleanly on SIGTERM (exit {code}):\n{log.read_text()[-3000:]}"
    assert "Started Dagster code server for module modelcd_assets.definitions" in log.read_text()
