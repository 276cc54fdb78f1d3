"""The modelcd command: one-line errors and exit codes, never a traceback for user mistakes."""

import subprocess
import sys
from pathlib import Path

import pytest

from modelcd_assets.cli import main

MODELCD = str(Path(sys.executable).with_name("modelcd"))


def run_cli(*args, env=None):
    return subprocess.run([MODELCD, *args], capture_output=True, text=True, env=env, timeout=300)


def test_register_prints_the_version(modelcd_env, tiny_base, capsys):
    assert main(["register", str(tiny_base), "--name", "cli-model"]) == 0
    assert "registered models:/cli-model/1" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["register", "/nonexistent/folder", "--name", "x"], "is not a folder"),
        (["gate", "nobody", "3"], "models:/nobody/3 is not in the registry"),
        (["serve", "nobody"], "'nobody' is not a registered candidate model"),
        (["up", "nobody"], "'nobody' is not a registered candidate model; run 'make demo'"),
        (["rollback", "nobody"], "nobody has no production version"),
    ],
)
def test_user_mistakes_exit_2_with_one_line(modelcd_env, args, message):
    import os

    proc = run_cli(*args, env=dict(os.environ))
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("modelcd: error:")]
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_adapter_without_registry_base_is_refused(modelcd_env, tiny_adapters, tmp_path, capsys):
    import json
    import shutil

    folder = shutil.copytree(tiny_adapters["good"], tmp_path / "local-base-adapter")
    cfg = json.loads((folder / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = "/some/local/path"
    (folder / "adapter_config.json").write_text(json.dumps(cfg))
    assert main(["register", str(folder), "--name", "x"]) == 2
    assert "pass --base models:/NAME/VERSION" in capsys.readouterr().err


def test_status_with_empty_registry(modelcd_env, capsys):
    assert main(["status"]) == 0
    assert "no candidate models registered yet" in capsys.readouterr().out
