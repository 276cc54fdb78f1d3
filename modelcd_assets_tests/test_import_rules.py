"""The house's import rules are import-linter contracts in pyproject.toml, run by `make test`; here they are shown to bite."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    # PYTHONPATH first: the copy under root is analysed, not the package installed in editable mode.
    return subprocess.run(
        [str(LINT), "--no-cache"],
        cwd=root,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def copy(tmp_path) -> Path:
    """The package and its contracts, copied: a wrong import is written into the copy only."""
    shutil.copytree(ROOT / "modelcd_assets", tmp_path / "modelcd_assets", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_every_contract():
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_the_copy_keeps_them_too(copy):
    done = lint(copy)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "module, line, broken",
    [
        # lib/ reaching for Dagster, directly or through the launcher
        ("lib/judging/gates.py", "import dagster", "lib/ imports no Dagster BROKEN"),
        ("lib/errors.py", "from modelcd_assets.launch import run_gate", "Each layer imports only the layers below it"),
        # the Dagster layer calling up into the face
        ("defs/assets/gate_selftest.py", "from modelcd_assets.faults.runner import run_selftest", "never imports the face"),
        ("defs/assets/gate_report.py", "from modelcd_assets.demo import main", "never imports the face"),
        # lib/'s own layers: the registry climbing to a task's implementation, a shared leaf to the registry (issue 28)
        ("lib/release/registry.py", "from modelcd_assets.lib.tasks.causal_lm import CausalLmTask", "lib/ is layered too"),
        ("lib/tasks/names.py", "from modelcd_assets.lib.release.registry import Registry", "lib/ is layered too"),
        ("lib/judging/contract.py", "from modelcd_assets.lib.causal_lm.contract import diff_lm_contracts", "lib/ is layered too"),
        # the serving process pulling in torch through lib
        ("lib/inference/tokens.py", "import torch", "The serving process imports neither torch nor Dagster BROKEN"),
    ],
)
def test_a_wrong_import_breaks_its_contract(copy, module, line, broken):
    path = copy / "modelcd_assets" / module
    path.write_text(path.read_text() + f"\n{line}  # a deliberately wrong import\n")
    done = lint(copy)
    assert done.returncode != 0, done.stdout
    assert broken in " ".join(done.stdout.split()), done.stdout  # its report wraps lines at 80 characters
