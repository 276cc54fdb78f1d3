"""What a fault class is, what a task's fault suite holds, and which classes a run gates: each task declares its own suite
(lib/tasks/names.TaskDeclaration.faults), so the sandbox knows no task by name."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from modelcd_assets.faults import builders as b
from modelcd_assets.faults.outcomes import REFUSED, Outcome
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.tasks.names import declaration_of, declarations, load_declared

if TYPE_CHECKING:
    from modelcd_assets.faults.sandbox import Sandbox


@dataclass(frozen=True)
class FaultClass:
    name: str
    group: str
    expected: Outcome
    build: b.Builder | None = None  # the faulty candidate; None: the production version itself is gated
    during: Callable[..., AbstractContextManager] | None = None  # a condition held while the candidate is gated
    probe: Callable | None = None  # a class that is no gated run at all (a sensor tick): returns the outcome itself
    # Measures whether the fault can be produced on the model under test: (False, what was measured) reports the class as
    # not reproducible on this model, counted apart, instead of gating a candidate that carries no fault.
    reproducible: Callable[..., tuple[bool, str]] | None = None
    traffic: str = "traffic_current"
    adapter_only: bool = False
    live: bool = False  # rolled out on live traffic (faults/live_faults.py); the others end at their offline gates

    @property
    def summary(self) -> str:
        fn = self.probe or self.during or self.build
        return (fn.__doc__ or "").strip().splitlines()[0] if fn else f"production itself, judged on {self.traffic}"


# A clean control: (label, kind, folder of the candidate to register), which must be promoted.
Control = tuple[str, str, Path]


@dataclass(frozen=True)
class FaultSuite:
    """What `modelcd faults run` gates for a production of one task: its fault classes, in order, and its clean controls.

    controls(sandbox, identical_n, retrained_n, notes) -> the controls, trained (where retrained) before any is gated; a
    control that cannot be made as asked says why in notes.
    load_texts(sandbox) -> what a server under load is asked while half the controls are gated (POST /v1/classify); None:
    no_load says why the controls are gated without load.
    live_load(sandbox, split) -> (the load generator's api, its requests) from the split: what live callers ask while a
    candidate is rolled out (faults/live_faults.py); None: the suite has no live classes and no control is rolled out.
    live_callers_at_once: how many of those callers ask at once."""

    classes: tuple[FaultClass, ...]
    controls: Callable[[Sandbox, int, int, list[str]], list[Control]]
    load_texts: Callable[[Sandbox], list[str]] | None = None
    no_load: str = ""
    live_load: Callable[[Sandbox, str], tuple[str, list]] | None = None
    live_callers_at_once: int = 2

    def __post_init__(self) -> None:
        names = [fc.name for fc in self.classes]
        if len(set(names)) != len(names):
            raise ModelcdError(f"a fault suite names a class twice: {sorted({n for n in names if names.count(n) > 1})}")
        if self.load_texts is None and not self.no_load:
            raise ModelcdError("a fault suite without load_texts says why its controls are gated without load (no_load)")
        if self.live_load is None and any(fc.live for fc in self.classes):
            raise ModelcdError("a fault suite with live classes says what their callers ask (live_load)")


def unlike_the_base(name: str) -> Outcome:
    """Refused at register, naming the file: an adapter's copy of a file its base serves differs from the base's."""
    return Outcome(REFUSED, detail=f" {name}: ")  # the space: config.json is not tokenizer_config.json


def suite_of(task: str) -> FaultSuite:
    """The fault suite task declares; a task that declares none is refused: its gates were never shown to catch these faults."""
    declared = declaration_of(task)
    if not declared.faults:
        having = [d.name for d in declarations() if d.faults]
        raise ModelcdError(
            f"{task} models declare no fault classes (TaskDeclaration.faults), so the fault sandbox has nothing to derive from their "
            f"production; it derives faults for {', '.join(having) or 'no'} models"
        )
    suite = load_declared(declared.faults, f"task {task!r}'s fault suite")
    if not isinstance(suite, FaultSuite):
        raise ModelcdError(f"task {task!r}'s fault suite {declared.faults} is a {type(suite).__name__}, not a faults/catalog.FaultSuite")
    return suite


def select(only: list[str] | None, task: str) -> list[FaultClass]:
    """The classes named (in the suite's order), or all of a task's; an unknown name, or one of another task, is an error that
    lists the known ones."""
    catalog = suite_of(task).classes
    if not only:
        return list(catalog)
    unknown = [n for n in only if n not in {fc.name for fc in catalog}]
    if unknown:
        raise ModelcdError(
            f"unknown fault class(es) {', '.join(unknown)} for a {task} production; known: {', '.join(fc.name for fc in catalog)}"
        )
    return [fc for fc in catalog if fc.name in only]
