"""docs/python-api.md runs as written: its snippets, in order, register a tiny adapter, gate it and read its gates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from modelcd_assets_tests.conftest import TINY_GATED_POLICY as POLICY
from modelcd_assets_tests.conftest import make_env
from modelcd_assets_tests.tiny_lm import TINY_LM_POLICY as LM_POLICY

pytestmark = pytest.mark.slow
DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"
MODEL = "tiny-intent"
LM_MODEL = "tiny-lm"  # the tiny LM's adapter declares models:/tiny-lm-base/1 (modelcd_assets_tests/tiny_lm.py)


def snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def run_doc(adapter_dir: Path, lm_base_dir: Path, lm_adapter_dir: Path) -> str:
    """Every snippet of the page in one namespace, as a reader pastes them one after another; returns what they printed."""
    import contextlib
    import io

    out = io.StringIO()
    namespace = {
        "adapter_dir": adapter_dir,
        "model_name": MODEL,
        "lm_base_dir": lm_base_dir,
        "lm_adapter_dir": lm_adapter_dir,
        "lm_model_name": LM_MODEL,
    }
    with contextlib.redirect_stdout(out):
        for code in snippets():
            exec(compile(code, str(DOC), "exec"), namespace)  # noqa: S102 - the page's own snippets, from this repository
    return out.getvalue()


def test_the_pages_snippets_are_short():
    code = snippets()
    assert len(code) == 5, "the page shows registering, gating, reading the gates and production, then a causal LM"
    assert all(len(c.strip().splitlines()) < 20 for c in code)


def test_the_python_api_doc_gates_a_good_adapter_into_production_and_blocks_a_worse_one(
    tmp_path, monkeypatch, tiny_trained, tiny_adapters, tiny_lm
):
    env = make_env(tmp_path / "home", monkeypatch)
    env.policy(MODEL, POLICY)
    env.policy(LM_MODEL, LM_POLICY)
    env.registry.register(tiny_trained, "tiny-base", role="base")

    good = run_doc(tiny_adapters["good"], tiny_lm.base, tiny_lm.adapter)
    assert f"registered models:/{MODEL}/1" in good and "run succeeded" in good, good
    assert re.search(r"accuracy_within_tolerance\s+pass", good) and "\npromotable\n" in good, good
    assert f"production of {MODEL}: models:/{MODEL}/1" in good

    assert f"models:/{LM_MODEL}/1: promoted" in good, good
    assert re.search(r"perplexity_within_tolerance\s+pass", good) and re.search(r"generation_is_healthy\s+pass", good), good

    worse = run_doc(tiny_adapters["worse"], tiny_lm.base, tiny_lm.adapter)
    assert f"registered models:/{MODEL}/2" in worse and "run stopped: a gate blocked" in worse, worse
    assert "blocked: [" in worse and "accuracy_within_tolerance" in worse
    assert f"production of {MODEL}: models:/{MODEL}/1" in worse  # unchanged
