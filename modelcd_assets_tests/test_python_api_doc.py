"""docs/python-api.md runs as written: its snippets, in order, register a tiny adapter, gate it and read its gates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from modelcd_assets_tests.conftest import TINY_GATED_POLICY as POLICY
from modelcd_assets_tests.conftest import make_env

pytestmark = pytest.mark.slow
DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"
MODEL = "tiny-intent"


def snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def run_doc(adapter_dir: Path) -> str:
    """Every snippet of the page in one namespace, as a reader pastes them one after another; returns what they printed."""
    import contextlib
    import io

    out = io.StringIO()
    namespace = {"adapter_dir": adapter_dir, "model_name": MODEL}
    with contextlib.redirect_stdout(out):
        for code in snippets():
            exec(compile(code, str(DOC), "exec"), namespace)  # noqa: S102 - the page's own snippets, from this repository
    return out.getvalue()


def test_the_pages_snippets_are_short():
    code = snippets()
    assert len(code) == 4, "the page shows registering, gating, reading the gates and production"
    assert all(len(c.strip().splitlines()) < 20 for c in code)


def test_the_python_api_doc_gates_a_good_adapter_into_production_and_blocks_a_worse_one(tmp_path, monkeypatch, tiny_trained, tiny_adapters):
    env = make_env(tmp_path / "home", monkeypatch)
    env.policy(MODEL, POLICY)
    env.registry.register(tiny_trained, "tiny-base", role="base")

    good = run_doc(tiny_adapters["good"])
    assert f"registered models:/{MODEL}/1" in good and "run succeeded" in good, good
    assert re.search(r"accuracy_within_tolerance\s+pass", good) and "\npromotable\n" in good, good
    assert f"production of {MODEL}: models:/{MODEL}/1" in good

    worse = run_doc(tiny_adapters["worse"])
    assert f"registered models:/{MODEL}/2" in worse and "run stopped: a gate blocked" in worse, worse
    assert "blocked: [" in worse and "accuracy_within_tolerance" in worse
    assert f"production of {MODEL}: models:/{MODEL}/1" in worse  # unchanged
