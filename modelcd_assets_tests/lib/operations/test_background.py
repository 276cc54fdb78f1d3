"""lib/operations/background: a call by name in a spawned process, its output in a log, its failure raised by name."""

import os
from pathlib import Path

import pytest

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.operations.background import Background


def write_marker(folder: Path) -> None:
    print("progress the terminal must not show")
    (Path(folder) / "marker").write_text(f"{os.getpid()} {os.nice(0)}")


def fail(folder: Path) -> None:
    raise ValueError(f"nothing to build in {folder}")


def test_a_call_runs_in_another_process_at_the_lowest_priority_and_writes_to_its_log(tmp_path, capfd):
    bg = Background(tmp_path / "logs" / "bg.log")
    try:
        bg.submit("a", f"{__name__}:write_marker", "the marker", tmp_path)
        assert "a" in bg and "b" not in bg
        assert bg.result("a") >= 0
    finally:
        bg.close()
    pid, niceness = map(int, (tmp_path / "marker").read_text().split())
    assert pid != os.getpid() and niceness == 19, "it runs in another process, on what this one leaves idle"
    assert "progress the terminal must not show" in (tmp_path / "logs" / "bg.log").read_text()
    assert "progress the terminal must not show" not in capfd.readouterr().out


def test_a_call_that_raises_is_raised_again_naming_it_and_the_log(tmp_path):
    bg = Background(tmp_path / "bg.log")
    try:
        bg.submit("a", f"{__name__}:fail", "task 'x''s demo head start", tmp_path)
        with pytest.raises(
            ModelcdError,
            match=rf"task 'x''s demo head start failed in the background: ValueError: nothing to build in .*; see {tmp_path}/bg.log",
        ):
            bg.result("a")
    finally:
        bg.close()


def test_a_call_that_cannot_be_loaded_is_refused_by_name(tmp_path):
    bg = Background(tmp_path / "bg.log")
    try:
        bg.submit("a", f"{__name__}:no_such_function", "the head start", tmp_path)
        with pytest.raises(ModelcdError, match=r"the head start failed in the background: .*no_such_function"):
            bg.result("a")
    finally:
        bg.close()
