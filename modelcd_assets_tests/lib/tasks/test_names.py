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
    from modelcd_assets.lib.tasks.names import declare_task, known_tasks

    known_tasks()  # the built-in ones first
    monkeypatch.setattr(names, "_DECLARED", dict(names._DECLARED))
    declare_task(_toy(f"{__name__}:_HalfTask", architectures=("ForToy",), peft_task_types=("TOY",)))
    assert known_tasks()[-1] == "toy" and require_task("toy") == "toy"
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["TinyForToy"]}))
    (tmp_path / "adapter_config.json").write_text(json.dumps({"task_type": "TOY"}))
    assert task_of_folder(tmp_path) == "toy" and task_of_adapter(tmp_path) == "toy"
    with pytest.raises(ModelcdError, match=r"unknown task 'x'; modelcd gates classification, causal-lm and toy models"):
        require_task("x")
    with pytest.raises(ModelcdError, match=r"task 'toy': .*:_HalfTask has no export, quantize, .*recheck; a task implements every step"):
        task_of("toy")
    with pytest.raises(ModelcdError, match="task 'toy' is declared twice"):
        declare_task(_toy("somewhere.else:Toy"))
    with pytest.raises(ModelcdError, match="cannot be loaded"):
        declare_task(_toy("modelcd_assets.no_such_module:Ghost", name="ghost")) or task_of("ghost")


def _toy(implementation: str, name: str = "toy", gates=None, **kw):
    from modelcd_assets.lib.tasks.names import Gate, TaskDeclaration

    roles = ("quality", "int8_fidelity", "speed", "cost")
    return TaskDeclaration(
        name,
        implementation,
        gates=tuple(Gate(f"toy_{r}", "evaluation", f"{r}_verdict", r, r) for r in roles) if gates is None else gates,
        contract="somewhere:diff",
        served="somewhere:served",
        subjects=("registered-files", "int8-model"),
        **kw,
    )


@pytest.mark.parametrize(
    "change, refusal",
    [
        ({"gates": ()}, r"task 'toy' declares no quality gate .* and no int8_fidelity gate .* and no speed gate .* and no cost gate"),
        ({"contract": ""}, r"task 'toy' declares no contract diff"),
        ({"served": ""}, r"task 'toy' declares no served files"),
        ({"subjects": ("registered-files",)}, r"lack int8-model, which every verdict covers"),
        ({"demo_head_start": "somewhere:prepare"}, r"task 'toy': a demo head start \('somewhere:prepare'\) needs a demo to start ahead of"),
    ],
)
def test_a_task_without_a_quality_gate_a_contract_or_served_files_does_not_load(change, refusal, monkeypatch):
    """Issue 28: fail closed at the seam, with a message that says what the task lacks."""
    import dataclasses

    from modelcd_assets.lib.tasks import names

    monkeypatch.setattr(names, "_DECLARED", dict(names._DECLARED))
    with pytest.raises(ModelcdError, match=refusal):
        names.declare_task(dataclasses.replace(_toy("somewhere:Toy"), **change))
    assert "toy" not in names._DECLARED


def test_a_policy_section_the_task_does_not_read_is_refused_naming_the_gate():
    from modelcd_assets.lib.tasks.names import refuse_foreign_policy

    refuse_foreign_policy(CLASSIFICATION, {"accuracy", "drift", "serving"}, "policy.yaml")
    with pytest.raises(ModelcdError, match=r"policy.yaml sets 'perplexity', which configures perplexity_within_tolerance \(of causal-lm"):
        refuse_foreign_policy(CLASSIFICATION, {"accuracy", "perplexity"}, "policy.yaml")
    with pytest.raises(ModelcdError, match=r"sets 'accuracy', which configures accuracy_within_tolerance \(of classification models\)"):
        refuse_foreign_policy(CAUSAL_LM, {"accuracy"}, "policy.yaml")


class _HalfTask:
    name = "toy"

    def prepare(self, record, state, registry):  # one step of thirteen: task_of must name the twelve it lacks
        return StepResult()


def test_everything_a_built_in_task_names_by_module_loads():
    """Each "package.module:name" a built-in declaration holds (implementation, contract diff, served files, policy models,
    server, fault suite, demo, demo head start) loads: a misspelt one would surface only when that part of modelcd is first used."""
    from modelcd_assets.faults.catalog import FaultSuite
    from modelcd_assets.lib.tasks.names import declaration_of, load_declared

    for task in (CLASSIFICATION, CAUSAL_LM):
        d = declaration_of(task)
        specs = [d.implementation, d.contract, d.served, d.server, d.faults, d.demo, *(model for _, model in d.policy_models)]
        assert all(specs), d
        loaded = [load_declared(spec, spec) for spec in specs]
        assert all(callable(x) for x in loaded[:3]) and callable(loaded[3]) and callable(loaded[5])
        assert isinstance(loaded[4], FaultSuite)
        if d.demo_head_start:
            assert callable(load_declared(d.demo_head_start, d.demo_head_start))
    assert declaration_of(CAUSAL_LM).demo_head_start
    with pytest.raises(ModelcdError, match=r"task 'x''s demo modelcd_assets.demos.classifier:classifier_demo cannot be loaded"):
        load_declared("modelcd_assets.demos.classifier:classifier_demo", "task 'x''s demo")


def test_the_built_in_tasks_come_first_even_when_a_plugin_is_imported_before_any_lookup():
    """A plugin's module imported directly declares its task; the built-in ones are declared before it, in every process."""
    import subprocess
    import sys

    code = "import modelcd_assets_tests.third_task.task; from modelcd_assets.lib.tasks.names import known_tasks; print(known_tasks())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "('classification', 'causal-lm', 'urgency-score')", out.stderr[-2000:]
