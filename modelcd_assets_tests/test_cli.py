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
        (["up"], "none of the demo's models is registered; run 'make demo'"),
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


@pytest.fixture
def closed_registry(modelcd_env, monkeypatch):
    """MLFLOW_TRACKING_URI on a port nothing listens on (bound and closed), with MLflow's HTTP retries off; returns the port."""
    from urllib.parse import urlsplit

    from modelcd_assets_tests.conftest import closed_port_uri

    uri = closed_port_uri(monkeypatch)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return urlsplit(uri).port


@pytest.mark.parametrize(
    "args",
    [
        ["register", "{tiny_base}", "--name", "m"],
        ["gate", "m", "1"],
        ["calibrate", "m", "--from", "{tiny_base}/config.json"],
        ["status"],
        ["status", "m"],
    ],
)
def test_a_registry_that_does_not_answer_is_exit_1_not_bad_input(closed_registry, tiny_base, capsys, args):
    """Issue 17: 'gate' said 'models:/m/1 is not in the registry' (exit 2) and the others printed a traceback."""
    assert main([a.format(tiny_base=tiny_base) for a in args]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("modelcd: registry unavailable: could not ") and "\n" not in err, err
    assert f"http://user:***@127.0.0.1:{closed_registry}" in err and "secret" not in err, err
    assert err.endswith("retry when the registry answers"), err


def test_a_gated_run_that_loses_the_registry_is_exit_1(modelcd_env, tiny_base, monkeypatch, capsys):
    """The registry answers the CLI's first question, then not the run's: nothing was decided, exit 1, and it says why."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INTERNAL_ERROR

    assert main(["register", str(tiny_base), "--name", "m"]) == 0

    def locked(self, name):
        raise MlflowException("(sqlite3.OperationalError) database is locked", error_code=INTERNAL_ERROR)

    monkeypatch.setattr(MlflowClient, "get_registered_model", locked)
    capsys.readouterr()
    assert main(["gate", "m", "1"]) == 1
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if line.startswith("modelcd: "))
    assert line.startswith("modelcd: registry unavailable: candidate: ") and "could not read the production alias of 'm'" in line, err
    assert "database is locked" in line and "nothing was promoted" in line, err
    # Issue 28: the terminal shows the progress bar and modelcd's lines; Dagster's event lines stay in the runs' logs.
    assert " - dagster - " not in err, err


@pytest.mark.parametrize(
    "fault, patch, line",
    [
        (RuntimeError("disk full"), "production", "modelcd: error: the calibrate run "),
        (
            ConnectionError("connection refused"),
            "client",
            "modelcd: registry unavailable: could not read the production alias of 'm' from ",
        ),
    ],
)
def test_calibrate_exits_2_only_when_the_set_is_refused(modelcd_env, tiny_base, tmp_path, monkeypatch, capsys, fault, patch, line):
    """A calibrate run that failed for another reason (a bug, the registry) was re-raised as bad input: exit 2, 'the set was refused'."""
    from mlflow import MlflowClient

    from modelcd_assets.lib.release.registry import Registry

    assert main(["register", str(tiny_base), "--name", "m"]) == 0
    source = tmp_path / "set.jsonl"
    source.write_text('{"text": "where is my parcel"}\n')

    def broken(self, name):
        raise fault

    # 'production' breaks modelcd's own code inside the run; 'client' breaks the registry under it (the CLI's own check lists models).
    (
        monkeypatch.setattr(Registry, "production", broken)
        if patch == "production"
        else monkeypatch.setattr(MlflowClient, "get_registered_model", broken)
    )
    capsys.readouterr()
    assert main(["calibrate", "m", "--from", str(source)]) == 1
    err = capsys.readouterr().err
    assert any(e.startswith(line) for e in err.splitlines()) and not any(e.startswith("refused:") for e in err.splitlines()), err
    assert str(fault) in err, err


def test_up_serves_the_demo_models_by_default():
    from modelcd_assets.demo import causal_lm, classifier
    from modelcd_assets.lib.tasks.names import demo_models

    assert tuple(demo_models().values()) == (classifier.MODEL_NAME, causal_lm.LM_MODEL_NAME)
