"""modelcd demo's driver (demo/__init__.py): each selected task's demo in order, its head start built in a process of its
own from the start and waited for before its demo, a failed head start failing the demo by name."""

import dataclasses
from pathlib import Path

import pytest

from modelcd_assets.lib.errors import ModelcdError

SEEN: list[str] = []


def head_start(home: Path) -> None:
    (Path(home) / "built").write_text("by the head start")


def broken_head_start(home: Path) -> None:
    raise RuntimeError("the GGUF file is truncated")


def first_demo(reg, home, phases):
    SEEN.append(f"first demo; head start done: {(Path(home) / 'built').is_file()}")
    return [], True


def second_demo(reg, home, phases):
    SEEN.append(f"second demo: {(Path(home) / 'built').read_text()}")
    return [], True


def _declarations(head: str):
    from modelcd_assets.lib.tasks.names import TaskDeclaration

    toy = TaskDeclaration("toy-a", "somewhere:Toy", demo=f"{__name__}:first_demo", demo_model="toy-a-model")
    return [toy, dataclasses.replace(toy, name="toy-b", demo=f"{__name__}:second_demo", demo_model="toy-b-model", demo_head_start=head)]


@pytest.fixture
def driver(modelcd_env, monkeypatch):
    import modelcd_assets.demo as demo

    SEEN.clear()
    monkeypatch.setattr(demo, "print_gate_table", lambda runs: None)
    return demo


def test_a_head_start_is_built_before_its_demo_and_timed_as_a_phase(driver, monkeypatch, tmp_path, modelcd_env):
    monkeypatch.setattr(driver, "declarations", lambda: _declarations(f"{__name__}:head_start"))
    timings = tmp_path / "timings.json"
    assert driver.main("all", timings) == 0
    assert SEEN[1] == "second demo: by the head start"
    import json

    phases = json.loads(timings.read_text())["phases"]
    assert [(p["task"], p["phase"], p["overlapped"]) for p in phases] == [("toy-b", "head start", True)]
    assert phases[0]["seconds"] >= 0 and phases[0]["waited"] >= 0


def test_a_failed_head_start_fails_the_demo_naming_it_and_its_log(driver, monkeypatch, modelcd_env):
    monkeypatch.setattr(driver, "declarations", lambda: _declarations(f"{__name__}:broken_head_start"))
    with pytest.raises(
        ModelcdError,
        match=r"task 'toy-b''s demo head start failed in the background: RuntimeError: the GGUF file is truncated; see .*head-start.log",
    ):
        driver.main("all")
    assert len(SEEN) == 1 and SEEN[0].startswith("first demo"), "the second demo ran without its head start"
