"""The tasks modelcd knows, and how a registered folder declares its own: torch-free, the registry and the server read it.

A task is declared once (declare_task) with everything that differs between kinds of model and can be said without its
implementation: its gates, the policy sections it reads, how a folder or adapter declares it, and its server. Tasks
beyond the built-in two are found where Python plugins are: the `modelcd.tasks` entry points of installed packages, and
the modules named in MODELCD_TASK_MODULES (comma-separated), each of which declares its task when imported.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from modelcd_assets.lib.errors import ModelcdError

CLASSIFICATION = "classification"
CAUSAL_LM = "causal-lm"
# Versions registered before tasks existed are classifiers: the only kind modelcd gated then.
DEFAULT_TASK = CLASSIFICATION


BUILTIN = "modelcd_assets.lib.tasks.builtin"  # declares the two tasks modelcd ships; imported by name, as a plugin is
TASK_MODULES_ENV = "MODELCD_TASK_MODULES"
ENTRY_POINT_GROUP = "modelcd.tasks"
# The assets of the gated graph a task's gate may sit on (defs/assets), in pipeline order.
GATE_ASSETS = ("candidate", "merged_model", "onnx_model", "quantized_model", "evaluation", "drift_report", "benchmark_results")
# What every task's gates must judge, by role: a task without one of these does not load.
REQUIRED_ROLES = {
    "quality": "candidate against production on the evaluation split",
    "int8_fidelity": "the INT8 artifact that would serve against its FP32 reference",
    "speed": "how fast the artifact that would serve runs",
    "cost": "what a unit of work costs",
}
# Policy sections every task reads: the gates every task has (health, safety, drift), serving, the live SLOs and triggers.
COMMON_POLICY = ("health", "safety", "drift", "serving", "slo", "triggers")


@dataclass(frozen=True)
class Gate:
    """One blocking gate of a task: a check named `name` on the gated graph's asset `asset`, judged by the task's method
    `verdict` (record, state) -> lib/judging/gates.Verdict.

    judges: what it judges, one line (the check's description). role: one of REQUIRED_ROLES, or None for a gate of the
    task's own. policy: the policy sections it reads. Tasks may declare a gate of the same name (the built-in two share
    their fidelity, golden, speed and cost gates): the check is then one, required of each of them, on one asset."""

    name: str
    asset: str
    verdict: str
    judges: str
    role: str | None = None
    policy: tuple[str, ...] = ()


LIVE_KINDS = {
    "shift": "one Prometheus histogram per version: the candidate's values against production's (a rank test and a tail test)",
    "rate": "two Prometheus counters per version, events and trials: the candidate's rate against production's (an exact test)",
    "agreement": "two counters of shadowed pairs, agreeing and all: the share of the candidate's answers that agree with production's",
    "paired_shift": "one histogram of per-pair differences, candidate minus production on the same request: the median difference",
}


@dataclass(frozen=True)
class LiveMetric:
    """One metric a rollout step judges on live traffic, the candidate's against production's, never mixed in one query.

    kind: one of LIVE_KINDS. source: the Prometheus series it is read from (a histogram; or events then trials counters),
    each labelled model and version. scale: what a value is multiplied by for display and thresholds (1000: seconds to ms).
    higher_is_worse: which way a difference blocks (agreement: lower always is). critical: a failure aborts the rollout at
    once, whatever the score. arms: the steps it is judged at, "canary" (the candidate answers), "shadow" (it answers
    copies) or both. defaults: its thresholds where its kind's (judging/rollout_policy.KIND_THRESHOLDS) do not fit."""

    name: str
    kind: str
    source: tuple[str, ...]
    describes: str
    scale: float = 1.0
    higher_is_worse: bool = True
    critical: bool = False
    arms: tuple[str, ...] = ("shadow", "canary")
    defaults: tuple[tuple[str, float], ...] = ()  # thresholds of this metric where its kind's defaults do not fit (max_shift: 1.0)


@dataclass(frozen=True)
class TaskDeclaration:
    """A task as the registry of tasks knows it, before its implementation is imported (lib/tasks/task.py's task_of does that).

    implementation: "package.module:Class", a class implementing lib/tasks/task.Task, built with no arguments.
    architectures: suffixes of config.json architectures that declare a folder of this task (LlamaForCausalLM: "ForCausalLM").
    peft_task_types: the peft adapter_config.json task_type values that declare an adapter of this task.
    gates: the task's own gates (lib/tasks/names.Gate); those every task has (artifact safety, health, contract, drift) are
        defs/checks' and judge every task. Each role of REQUIRED_ROLES must be among them.
    adapter_files: what an adapter folder of this task may hold and what happens to each file (lib/tasks/adapter_files.AdapterFile),
        read at register and by artifact_is_safe.
    policy_sections: the policy sections the task reads besides its gates' and COMMON_POLICY.
    policy_models: sections the task adds to the policy file, by name: "package.module:Class", a pydantic model of them.
    served: "package.module:function" (record) -> lib/release/servable.ServedFiles: what a version of this task serves (its
        paths, and how to hash each attestation subject), read without torch by the server, promotion, rollback and the benches.
    subjects: the subjects of its attestation (lib/release/attestation.SUBJECT_NAMES), always the registered files and the INT8 model.
    contract: "package.module:function" (old, new, token_ids_changed) -> list of judging/contract.Change: what a change of
        this task's I/O contract (the `contract` tag its export step records) requires of the version number.
    slo_latency: (name, Prometheus histogram) pairs: the p99 of each, in ms, is an SLO of this task's production (SloPolicy's
        field of that name is its limit), beside the error and NaN ratios every task's SLO judges.
    server: "package.module:function" building the public app for a model of this task from serving/server.ServerInputs
        (None: `modelcd serve` refuses its models, naming the task).
    server_api: what that app answers, as `modelcd up` prints it.
    faults: "package.module:name" of a faults/catalog.FaultSuite: the faults `modelcd faults run` derives from a production of
        this task, and its clean controls (None: the sandbox refuses this task's models, naming it).
    demo: "package.module:function" (registry, home, phases) -> (gate runs, whether they showed what they must): this task's
        part of `modelcd demo` (None: the demo has none). demo_model: the registered model name it gates.
    live_metrics: what a rollout step of this task's versions judges on live traffic (LiveMetric), its defaults; a task
        without any cannot be rolled out (a policy with a rollout section for its model is refused).
    demo_head_start: "package.module:function" (home) -> None: what the task's demo can build from its files alone, before
        its turn: `modelcd demo` runs it in a process of its own, at the lowest CPU priority, while the demos before it run
        (None: nothing).
    """

    name: str
    implementation: str
    architectures: tuple[str, ...] = ()
    peft_task_types: tuple[str, ...] = ()
    gates: tuple[Gate, ...] = ()
    adapter_files: tuple = ()
    policy_sections: tuple[str, ...] = ()
    policy_models: tuple[tuple[str, str], ...] = ()
    contract: str = ""
    served: str = ""
    slo_latency: tuple[tuple[str, str], ...] = ()
    subjects: tuple[str, ...] = ()
    server: str | None = None
    server_api: str = ""
    faults: str | None = None
    demo: str | None = None
    demo_model: str = ""
    demo_head_start: str | None = None
    live_metrics: tuple[LiveMetric, ...] = ()

    def gate(self, name: str) -> Gate | None:
        return next((g for g in self.gates if g.name == name), None)

    def reads_policy(self) -> set[str]:
        """Every policy section this task reads."""
        rollout = ("rollout",) if self.live_metrics else ()
        return {*COMMON_POLICY, *rollout, *self.policy_sections, *(dict(self.policy_models)), *(p for g in self.gates for p in g.policy)}


_DECLARED: dict[str, TaskDeclaration] = {}


def declare_task(declaration: TaskDeclaration) -> None:
    """Make a task known: registration, gating, the CLI's choices and every reader of a version's task look it up here.
    The built-in tasks are declared first, whoever declares first, so the tasks are listed in one order in every process."""
    _load_builtin()
    known = _DECLARED.get(declaration.name)
    if known is not None and known != declaration:
        raise ModelcdError(
            f"task {declaration.name!r} is declared twice ({known.implementation} and {declaration.implementation}); "
            "give the new one another name"
        )
    name = declaration.name
    for what, spec in (
        ("implementation", declaration.implementation),
        ("contract diff", declaration.contract),
        ("served files", declaration.served),
    ):
        if ":" not in spec:
            raise ModelcdError(
                f"task {name!r} declares no {what} ({spec!r} is not 'package.module:name'); a task declares its implementation, "
                "its contract diff and its served files"
            )
    if bool(declaration.demo) != bool(declaration.demo_model):
        raise ModelcdError(f"task {name!r}: a demo ({declaration.demo!r}) and the model it gates ({declaration.demo_model!r}) go together")
    if declaration.demo_head_start and not declaration.demo:
        raise ModelcdError(f"task {name!r}: a demo head start ({declaration.demo_head_start!r}) needs a demo to start ahead of")
    if missing := [s for s in ("registered-files", "int8-model") if s not in declaration.subjects]:
        raise ModelcdError(
            f"task {name!r}: its attestation subjects {declaration.subjects} lack {', '.join(missing)}, which every verdict covers"
        )
    roles = [g.role for g in declaration.gates]
    if missing := [r for r in REQUIRED_ROLES if r not in roles]:
        raise ModelcdError(
            f"task {name!r} declares no {' and no '.join(f'{r} gate (one that judges {REQUIRED_ROLES[r]})' for r in missing)}; "
            "give it a Gate with that role"
        )
    for gate in declaration.gates:
        if gate.asset not in GATE_ASSETS:
            raise ModelcdError(
                f"task {name!r}: gate {gate.name} sits on {gate.asset!r}, which is not an asset of the gated graph {GATE_ASSETS}"
            )
        if gate.role is not None and gate.role not in REQUIRED_ROLES:
            raise ModelcdError(f"task {name!r}: gate {gate.name}'s role {gate.role!r} is none of {', '.join(REQUIRED_ROLES)}")
        if roles.count(gate.role) > 1 and gate.role is not None:
            raise ModelcdError(f"task {name!r} declares {roles.count(gate.role)} {gate.role} gates; one gate has each role")
        for other in _DECLARED.values():
            theirs = other.gate(gate.name)
            if other.name != name and theirs is not None and theirs.asset != gate.asset:
                raise ModelcdError(
                    f"task {name!r}: gate {gate.name} sits on {gate.asset}, but task {other.name!r}'s gate of that name sits on "
                    f"{theirs.asset}; one check sits on one asset, so give the gate another name"
                )
    for metric in declaration.live_metrics:
        if metric.kind not in LIVE_KINDS:
            raise ModelcdError(f"task {name!r}: live metric {metric.name}'s kind {metric.kind!r} is none of {', '.join(LIVE_KINDS)}")
        if len(metric.source) != (1 if metric.kind in ("shift", "paired_shift") else 2):
            raise ModelcdError(
                f"task {name!r}: live metric {metric.name} ({metric.kind}) reads {LIVE_KINDS[metric.kind]}, not {metric.source}"
            )
        if not metric.arms or set(metric.arms) - {"shadow", "canary"}:
            raise ModelcdError(f"task {name!r}: live metric {metric.name}'s arms {metric.arms} must be among shadow and canary")
    if len({m.name for m in declaration.live_metrics}) != len(declaration.live_metrics):
        raise ModelcdError(f"task {name!r} declares two live metrics of one name")
    if len({g.name for g in declaration.gates}) != len(declaration.gates):
        raise ModelcdError(f"task {name!r} declares two gates of one name")
    _DECLARED[name] = declaration


def load_declared(spec: str | None, what: str):
    """The object a declaration names as "package.module:attribute" (None for None); a name that does not load is refused, naming it."""
    if spec is None:
        return None
    module, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ModelcdError(f"{what} {spec} cannot be loaded ({type(e).__name__}: {e})") from e


_LOADED_PLUGINS: set[str] = set()


@functools.cache
def _entry_point_modules() -> tuple[str, ...]:
    """The modelcd.tasks entry points of the installed packages: read once per process (scanning every installed
    distribution's metadata costs milliseconds, and the tasks are asked for on every policy validation)."""
    from importlib.metadata import entry_points

    return tuple(ep.value for ep in entry_points(group=ENTRY_POINT_GROUP))


def _load_builtin() -> None:
    if BUILTIN not in _LOADED_PLUGINS:
        _LOADED_PLUGINS.add(BUILTIN)  # first: the built-in module's own declare_task calls come back here
        importlib.import_module(BUILTIN)


def _load_plugins() -> None:
    """Import what declares the tasks beyond the built-in ones (entry points, then MODELCD_TASK_MODULES), each once."""
    _load_builtin()
    specs = list(_entry_point_modules())
    specs += [m.strip() for m in os.environ.get(TASK_MODULES_ENV, "").split(",") if m.strip()]
    for spec in specs:
        if spec in _LOADED_PLUGINS:
            continue
        _LOADED_PLUGINS.add(spec)
        try:
            importlib.import_module(spec.partition(":")[0])
        except ImportError as e:
            _LOADED_PLUGINS.discard(spec)
            raise ModelcdError(
                f"the task module {spec!r} (named by {TASK_MODULES_ENV} or a {ENTRY_POINT_GROUP} entry point) cannot be imported "
                f"({type(e).__name__}: {e}); install it or remove it"
            ) from e


def known_tasks() -> tuple[str, ...]:
    """Every declared task's name, in the order they were declared (the built-in ones, then the plugins')."""
    _load_plugins()
    return tuple(_DECLARED)


def declarations() -> tuple[TaskDeclaration, ...]:
    """Every declared task, in the order they were declared."""
    _load_plugins()
    return tuple(_DECLARED.values())


def demo_models() -> dict[str, str]:
    """Each task's demo model name, for the tasks that have a demo: what `modelcd demo`, `modelcd up` and `modelcd faults run`
    default to."""
    return {d.name: d.demo_model for d in declarations() if d.demo}


def declaration_of(task: str) -> TaskDeclaration:
    return _DECLARED[require_task(task)]


def require_task(task: str) -> str:
    if task not in _DECLARED:
        _load_plugins()
    if task not in _DECLARED:
        known = known_tasks()
        listed = " and ".join([", ".join(known[:-1]), known[-1]] if len(known) > 1 else known)
        raise ModelcdError(f"unknown task {task!r}; modelcd gates {listed} models (register with --task and one of them)")
    return task


def refuse_foreign_policy(task: str, sections, source: str) -> None:
    """A policy that sets a section its model's task does not read (a gate it does not have) is refused, naming the gate."""
    reads = declaration_of(task).reads_policy()
    for section in sorted(set(sections) - reads):
        gates = [f"{g.name} (of {d.name} models)" for d in declarations() for g in d.gates if section in g.policy]
        what = f"configures {', '.join(gates)}, a gate {task} models do not have" if gates else f"is not read by {task} models"
        raise ModelcdError(
            f"{source} sets {section!r}, which {what}; remove {section!r} from it, or register the model with the task that has the gate"
        )


def task_of_folder(folder: Path) -> str:
    """The task a model folder's config declares by its architecture (a *ForCausalLM is a causal LM); any other, a classifier."""
    config = Path(folder) / "config.json"
    architectures = json.loads(config.read_text()).get("architectures") or [] if config.is_file() else []
    for declared in declarations():
        if any(str(a).endswith(suffix) for a in architectures for suffix in declared.architectures):
            return declared.name
    return DEFAULT_TASK


def task_of_adapter(folder: Path) -> str | None:
    """The task a peft adapter declares by its task_type (CAUSAL_LM, SEQ_CLS, or another task's); None when it declares none
    that a task claims."""
    config = Path(folder) / "adapter_config.json"
    task_type = json.loads(config.read_text()).get("task_type") if config.is_file() else None
    if not task_type:
        return None
    return next((d.name for d in declarations() if str(task_type) in d.peft_task_types), None)
