"""How a folder declares its task, and the error for a task modelcd does not know."""

import json

import pytest

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.tasks.names import CAUSAL_LM, CLASSIFICATION, require_task, task_of_adapter, task_of_folder
from modelcd_assets.lib.tasks.task import StepResult, task_of


def test_a_config_declares_its_task_by_architecture(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    assert task_of_folder(tmp_path) == CAUSAL_LM
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertForSequenceClassification"]}))
    assert task_of_folder(tmp_path) == CLASSIFICATION
    (tmp_path / "config.json").unlink()
    assert task_of_folder(tmp_path) == CLASSIFICATION


def test_an_adapter_declares_its_task_by_peft_task_type(tmp_path):
    assert task_of_adapter(tmp_path) is None
    for task_type, task in (("CAUSAL_LM", CAUSAL_LM), ("SEQ_CLS", CLASSIFICATION), ("TOKEN_CLS", None)):
        (tmp_path / "adapter_config.json").write_text(json.dumps({"task_type": task_type}))
        assert task_of_adapter(tmp_path) == task


def test_an_unknown_task_is_refused_with_the_known_ones():
    assert require_task(CAUSAL_LM) == CAUSAL_LM
    with pytest.raises(ModelcdError, match="unknown task 'seq2seq'; modelcd gates classification and causal-lm models"):
        require_task("seq2seq")
    with pytest.raises(ModelcdError, match="unknown task"):
        task_of("seq2seq")
    assert task_of(CAUSAL_LM).name == CAUSAL_LM and task_of(CLASSIFICATION).name == CLASSIFICATION


def test_a_declared_task_is_known_everywhere_and_an_incomplete_one_is_refused_by_name(tmp_path, monkeypatch):
    """Issue 28: a task is one registered object; task_of looks it up, and what it loads must implement every step."""
    from modelcd_assets.lib.tasks import names
    from modelcd_assets.lib.tasks.names import TaskDeclaration, declare_task, known_tasks

    monkeypatch.setattr(names, "_DECLARED", dict(names._DECLARED))
    declare_task(TaskDeclaration("toy", f"{__name__}:_HalfTask", architectures=("ForToy",), peft_task_types=("TOY",)))
    assert known_tasks()[-1] == "toy" and require_task("toy") == "toy"
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["TinyForToy"]}))
    (tmp_path / "adapter_config.json").write_text(json.dumps({"task_type": "TOY"}))
    assert task_of_folder(tmp_path) == "toy" and task_of_adapter(tmp_path) == "toy"
    with pytest.raises(ModelcdError, match=r"unknown task 'x'; modelcd gates classification, causal-lm and toy models"):
        require_task("x")
    with pytest.raises(ModelcdError, match=r"task 'toy': .*:_HalfTask has no export, quantize, .*recheck; a task implements every step"):
        task_of("toy")
    with pytest.raises(ModelcdError, match="task 'toy' is declared twice"):
        declare_task(TaskDeclaration("toy", "somewhere.else:Toy"))
    with pytest.raises(ModelcdError, match="cannot be loaded"):
        declare_task(TaskDeclaration("ghost", "modelcd_assets.no_such_module:Ghost")) or task_of("ghost")


class _HalfTask:
    name = "toy"

    def prepare(self, record, state, registry):  # one step of thirteen: task_of must name the twelve it lacks
        return StepResult()
