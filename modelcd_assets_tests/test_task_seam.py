"""Issue 28: one seam per task. Only the tasks' own modules name a task, and nothing that gates, releases, judges or
serves knows the third task of the tests (modelcd_assets_tests/third_task), which goes through all of it."""

from __future__ import annotations

import re
from pathlib import Path

import modelcd_assets

PACKAGE = Path(modelcd_assets.__file__).parent
# Where a task may be named: the registry of tasks, each task's own modules (its code, its server, its fault suite and
# builders, its demo) and the demo's data. The sandbox, the demo's driver and everything else read the declarations.
TASK_OWNED = (
    "lib/tasks/",
    "lib/causal_lm/",
    "lib/classifier/",
    "lib/demo/",
    "demo/classifier.py",
    "demo/causal_lm.py",
    "faults/classifier_faults.py",
    "faults/lm_faults.py",
    "serving/classifier/",
    "serving/lm/",
)
TASK_NAMES = re.compile(r"""["'](classification|causal-lm)["']|\b(CLASSIFICATION|CAUSAL_LM)\b""")
# The parts of modelcd the third task must go through without any of them knowing it.
SEAM = (
    "defs/",
    "lib/release/",
    "lib/judging/",
    "serving/",
    "faults/",
    "demo/",
    "launch.py",
    "cli.py",
    "gate_results.py",
    "definitions.py",
)


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), path.read_text()


def test_no_task_is_named_outside_the_tasks_own_modules():
    found = [
        f"{rel}:{n}: {line.strip()}"
        for rel, text in _sources()
        if not rel.startswith(TASK_OWNED)
        for n, line in enumerate(text.splitlines(), 1)
        if TASK_NAMES.search(line) and "TaskType.CAUSAL_LM" not in line
    ]
    assert not found, "a task named outside lib/tasks and the tasks' own modules:\n" + "\n".join(found)


def test_nothing_that_gates_releases_judges_or_serves_knows_the_third_task():
    third = re.compile(r"urgency|third_task", re.IGNORECASE)
    found = [rel for rel, text in _sources() if rel.startswith(SEAM) and third.search(text)]
    assert not found, found


def test_the_grep_sees_a_task_named_where_it_must_not_be(tmp_path):
    """The pattern catches the forms a branch on a task takes."""
    for line in ('if task == "causal-lm":', "if record.task == CLASSIFICATION:", "task='classification'"):
        assert TASK_NAMES.search(line), line
    for line in ("declaration_of(record.task).subjects", "a classification head", "task_of(task)"):
        assert not TASK_NAMES.search(line), line
