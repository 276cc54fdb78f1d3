"""The task interface: each step of the gated pipeline that depends on the kind of model, as one method.

The Dagster assets call these methods and publish what they return; the checks judge the reports they write with the
verdict functions of lib/judging/gates.py. A step's result is plain data (`StepResult`): metadata values are numbers,
strings, `Md` (markdown) or `Json`, which the Dagster layer turns into its own metadata types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.gates import Verdict
from modelcd_assets.lib.judging.policy import Policy
from modelcd_assets.lib.layout import CandidateFiles
from modelcd_assets.lib.release.calibration import CalibrationStore
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import CandidateRef, Registry
from modelcd_assets.lib.tasks.names import declaration_of, load_declared


@dataclass(frozen=True)
class Md:
    """Markdown metadata."""

    text: str


@dataclass(frozen=True)
class Json:
    """JSON metadata."""

    value: Any


@dataclass(frozen=True)
class StepResult:
    metadata: dict = field(default_factory=dict)
    data_version: str | None = None


class State(Protocol):
    """What a step may ask of the state folder (resources/state.LocalStateResource is one)."""

    @property
    def root(self) -> Path: ...

    def files(self, ref: CandidateRef) -> CandidateFiles: ...

    def record(self, ref: CandidateRef) -> CandidateRecord: ...

    def cache_dir(self, kind: str) -> Path: ...

    def split(self, name: str) -> Path: ...

    def calibration_sets(self) -> CalibrationStore: ...

    def variant_decision(self, name: str, key: str) -> Path: ...


class Task(Protocol):
    """One kind of model. Every method takes the candidate's record (what it is, its files and build, what it is judged
    against, its effective policy) and the state folder; each writes the report its gates judge where lib/layout.py says.

    Its gates are declared with the task (lib/tasks/names.TaskDeclaration.gates): each names the method here that judges
    it, (record, state) -> Verdict, which the implementation must have."""

    name: str

    def prepare(self, record: CandidateRecord, state: State, registry: Registry) -> StepResult:
        """merged_model: the deployable model (a classifier's merged folder; a causal LM's base build and adapter slots), and the health
        report."""

    def export(self, record: CandidateRecord, state: State, registry: Registry) -> StepResult:
        """onnx_model: the FP32 ONNX reference and its parity with torch, the I/O contract and the SemVer report."""

    def quantize(self, record: CandidateRecord, state: State) -> StepResult:
        """quantized_model: the INT8 artifact that would serve, its fidelity to FP32, and what a server must reproduce (the probe)."""

    def evaluate(self, record: CandidateRecord, state: State) -> StepResult:
        """evaluation: paired per-example scores of candidate and production, and the golden cases."""

    def drift(self, record: CandidateRecord, state: State, traffic_sample: str, reference_sample: str) -> StepResult:
        """drift_report: input drift of traffic vs reference, and output drift candidate vs production on the same traffic."""

    def live_input_drift(self, record: CandidateRecord, state: State, texts: list[str]) -> dict[str, float]:
        """live_traffic: a window of production's sampled request texts against the split it was validated on, per descriptor."""

    def benchmark(self, record: CandidateRecord, state: State) -> StepResult:
        """benchmark_results: what decides the speed (a classifier: its graph against production's, interleaved; a causal LM: its
        base build's), and what a unit of work costs."""

    def recheck(self, record: CandidateRecord, state: State, policy: Policy) -> Verdict:
        """production_recheck: production's speed timed again, against what its throughput gate recorded."""


def task_of(name: str) -> Task:
    """The implementation of a declared task (lib/tasks/names.declare_task) by its name (a version's modelcd.task tag).

    An implementation that lacks a step of the Task interface, or says it is another task, is refused, naming what is wrong."""
    declared = declaration_of(name)
    task = load_declared(declared.implementation, f"task {name!r}: its implementation")()
    missing = [step for step in TASK_STEPS if not callable(getattr(task, step, None))]
    if missing:
        raise ModelcdError(
            f"task {name!r}: {declared.implementation} has no {', '.join(missing)}; a task implements every step of lib/tasks/task.Task"
        )
    if unjudged := [f"{g.verdict} (gate {g.name})" for g in declared.gates if not callable(getattr(task, g.verdict, None))]:
        raise ModelcdError(f"task {name!r}: {declared.implementation} has no {', '.join(unjudged)}, which its declared gates name")
    if getattr(task, "name", None) != name:
        raise ModelcdError(f"task {name!r}: {declared.implementation} says it is {getattr(task, 'name', None)!r}")
    return task


# The steps every task implements: the methods of the Task interface.
TASK_STEPS = tuple(n for n, v in vars(Task).items() if callable(v) and not n.startswith("_"))
