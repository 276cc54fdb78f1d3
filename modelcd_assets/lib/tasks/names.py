"""The tasks modelcd knows, and how a registered folder declares its own: torch-free, the registry and the server read it."""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path

from modelcd_assets.lib.errors import ModelcdError

CLASSIFICATION = "classification"
CAUSAL_LM = "causal-lm"
# Versions registered before tasks existed are classifiers: the only kind modelcd gated then.
DEFAULT_TASK = CLASSIFICATION


@dataclass(frozen=True)
class TaskDeclaration:
    """A task as the registry of tasks knows it, before its implementation is imported (lib/tasks/task.py's task_of does that).

    implementation: "package.module:Class", a class implementing lib/tasks/task.Task, built with no arguments.
    architectures: suffixes of config.json architectures that declare a folder of this task (LlamaForCausalLM: "ForCausalLM").
    peft_task_types: the peft adapter_config.json task_type values that declare an adapter of this task.
    server: "package.module:function" building the public app for a model of this task from serving/server.ServerInputs
        (None: `modelcd serve` refuses its models, naming the task).
    server_api: what that app answers, as `modelcd up` prints it.
    """

    name: str
    implementation: str
    architectures: tuple[str, ...] = ()
    peft_task_types: tuple[str, ...] = ()
    server: str | None = None
    server_api: str = ""


_DECLARED: dict[str, TaskDeclaration] = {}


def declare_task(declaration: TaskDeclaration) -> None:
    """Make a task known: registration, gating, the CLI's choices and every reader of a version's task look it up here."""
    known = _DECLARED.get(declaration.name)
    if known is not None and known != declaration:
        raise ModelcdError(
            f"task {declaration.name!r} is declared twice ({known.implementation} and {declaration.implementation}); "
            "give the new one another name"
        )
    if ":" not in declaration.implementation:
        raise ModelcdError(f"task {declaration.name!r}: its implementation {declaration.implementation!r} is not 'package.module:Class'")
    _DECLARED[declaration.name] = declaration


def load_declared(spec: str | None, what: str):
    """The object a declaration names as "package.module:attribute" (None for None); a name that does not load is refused, naming it."""
    if spec is None:
        return None
    module, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ModelcdError(f"{what} {spec} cannot be loaded ({type(e).__name__}: {e})") from e


def known_tasks() -> tuple[str, ...]:
    """Every declared task's name, in the order they were declared."""
    return tuple(_DECLARED)


def declaration_of(task: str) -> TaskDeclaration:
    return _DECLARED[require_task(task)]


def require_task(task: str) -> str:
    if task not in _DECLARED:
        known = known_tasks()
        listed = " and ".join([", ".join(known[:-1]), known[-1]] if len(known) > 1 else known)
        raise ModelcdError(f"unknown task {task!r}; modelcd gates {listed} models (register with --task and one of them)")
    return task


declare_task(
    TaskDeclaration(
        CLASSIFICATION,
        "modelcd_assets.lib.tasks.classification:ClassificationTask",
        peft_task_types=("SEQ_CLS",),
        server="modelcd_assets.serving.classifier.router:classifier_server",
        server_api="POST /v1/classify",
    )
)
declare_task(
    TaskDeclaration(
        CAUSAL_LM,
        "modelcd_assets.lib.tasks.causal_lm:CausalLmTask",
        architectures=("ForCausalLM",),
        peft_task_types=("CAUSAL_LM",),
        server="modelcd_assets.serving.lm.router:lm_server",
        server_api="the OpenAI API: POST /v1/chat/completions, /v1/completions",
    )
)
TASKS = known_tasks()  # the built-in tasks; known_tasks() also lists those declared later


def task_of_folder(folder: Path) -> str:
    """The task a model folder's config declares by its architecture (a *ForCausalLM is a causal LM); any other, a classifier."""
    config = Path(folder) / "config.json"
    architectures = json.loads(config.read_text()).get("architectures") or [] if config.is_file() else []
    for declared in _DECLARED.values():
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
    return next((d.name for d in _DECLARED.values() if str(task_type) in d.peft_task_types), None)
