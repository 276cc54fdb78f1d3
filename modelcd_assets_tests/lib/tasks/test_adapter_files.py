"""Every kind of file an adapter folder may hold, for each task, shown used, compared with the base's copy or refused; anything
else refused, at register (exit 2) as at the gate. Hand-made folders: nothing is trained or loaded."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from modelcd_assets.lib.errors import BadCandidate
from modelcd_assets.lib.tasks.adapter_files import (
    COMPARED,
    DOCUMENTATION,
    REFUSED,
    USED,
    adapter_file_findings,
    adapter_files_of,
    refuse_unlisted_files,
)
from modelcd_assets.lib.tasks.names import CAUSAL_LM, CLASSIFICATION

TASKS = (CLASSIFICATION, CAUSAL_LM)

# A concrete name for each pattern that is a glob.
NAMES = {"LICENSE*": "LICENSE.txt", "*.onnx_adapter": "adapter.onnx_adapter"}
# The base's copy of each compared file, and the same meaning in other bytes (None: binary, only the same bytes pass).
BASE_FILES = {
    "tokenizer.json": (
        {"model": {"vocab": {"a": 0, "b": 1}}, "added_tokens": [{"id": 2, "content": "<|im_end|>", "special": True}]},
        "json",
    ),
    "tokenizer_config.json": ({"eos_token": "<|im_end|>", "chat_template": "{{ messages }}", "model_max_length": 256}, "json"),
    "special_tokens_map.json": ({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, "json"),
    "added_tokens.json": ({"<|im_end|>": 2}, "json"),
    "vocab.json": ({"a": 0, "b": 1, "<|im_end|>": 2}, "json"),
    "generation_config.json": ({"eos_token_id": 2, "bos_token_id": 1}, "json"),
    "config.json": ({"vocab_size": 3, "hidden_size": 64, "id2label": {"0": "billing", "1": "tech"}}, "json"),
    "merges.txt": ("#version: 0.2\na b\nab c\n", "text"),
    "vocab.txt": ("[PAD]\n[UNK]\nhello\n", "text"),
    "chat_template.jinja": ("{% for m in messages %}{{ m['content'] }}{% endfor %}\n", "text"),
    "tokenizer.model": (b"\x0a\x0b\x0a\x05<unk>\x15\x00\x00\x00\x00", "binary"),
    "spiece.model": (b"\x0a\x0b\x0a\x05<unk>\x15\x00\x00\x00\x00", "binary"),
    "sentencepiece.bpe.model": (b"\x0a\x0b\x0a\x05<unk>\x15\x00\x00\x00\x00", "binary"),
}
ENTRIES = [(task, entry) for task in TASKS for entry in adapter_files_of(task)]


def _write(path, value, kind) -> None:
    if kind == "json":
        path.write_text(json.dumps(value))
    elif kind == "text":
        path.write_text(value)
    else:
        path.write_bytes(value)


def _same_meaning(path, value, kind) -> None:
    """Other bytes that say the same: JSON re-indented with its keys in another order, text with CRLF line ends."""
    if kind == "json":
        path.write_text(json.dumps(dict(reversed(list(value.items()))), indent=4) + "\n")
    elif kind == "text":
        path.write_bytes(value.replace("\n", "\r\n").encode())


def _changed(path, value, kind) -> None:
    if kind == "json":
        path.write_text(json.dumps({**value, "eos_token": "<|tool|>"}))
    elif kind == "text":
        path.write_text(value + "c d\n")
    else:
        path.write_bytes(value[:-1] + b"\x01")


def handmade_adapter(folder, task: str):
    """What peft's save_pretrained writes for a LoRA adapter, without training one."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    task_type = "SEQ_CLS" if task == CLASSIFICATION else "CAUSAL_LM"
    (folder / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "r": 4, "task_type": task_type, "base_model_name_or_path": "models:/tiny-base/1"})
    )
    save_file(
        {"lora_A.weight": np.zeros((4, 32), np.float32), "lora_B.weight": np.zeros((32, 4), np.float32)},
        str(folder / "adapter_model.safetensors"),
    )
    (folder / "README.md").write_text("# adapter\n")
    return folder


@pytest.fixture
def base(tmp_path):
    folder = tmp_path / "base"
    folder.mkdir()
    for name, (value, kind) in BASE_FILES.items():
        _write(folder / name, value, kind)
    return folder


def findings(adapter, task, base_dir, allow=()) -> dict[str, str]:
    return {f.path: f.reason for f in adapter_file_findings(adapter, task, base_dir, allow)}


def test_the_handmade_adapter_holds_only_used_files_and_documentation(tmp_path, base):
    for task in TASKS:
        adapter = handmade_adapter(tmp_path / task, task)
        assert findings(adapter, task, base) == {}
        assert {
            f.pattern: f.treatment
            for f in adapter_files_of(task)
            if f.pattern in ("adapter_config.json", "adapter_model.safetensors", "README.md")
        } == {"adapter_config.json": USED, "adapter_model.safetensors": USED, "README.md": DOCUMENTATION}


@pytest.mark.parametrize("task, entry", ENTRIES, ids=[f"{t}-{e.pattern}" for t, e in ENTRIES])
def test_each_declared_file_is_used_compared_or_refused(task, entry, tmp_path, base):
    adapter = handmade_adapter(tmp_path / "adapter", task)
    name = NAMES.get(entry.pattern, entry.pattern)
    if entry.treatment in (USED, DOCUMENTATION):
        if not (adapter / name).is_file():
            (adapter / name).write_text("Apache-2.0\n")
        assert findings(adapter, task, base) == {}
    elif entry.treatment == REFUSED:
        (adapter / name).write_text("{}")
        assert findings(adapter, task, base) == {name: entry.note}
        assert "remove it" in entry.note
    else:
        assert entry.treatment == COMPARED
        value, kind = BASE_FILES[name]
        shutil.copy2(base / name, adapter / name)
        assert findings(adapter, task, base) == {}, "the base's own copy, byte for byte"
        if kind != "binary":
            _same_meaning(adapter / name, value, kind)
            assert findings(adapter, task, base) == {}, "the same meaning in other bytes"
        _changed(adapter / name, value, kind)
        got = findings(adapter, task, base)
        assert list(got) == [name] and got[name].startswith("differs from the base's copy") and got[name].endswith(entry.note)
        (base / name).unlink()
        assert findings(adapter, task, base)[name].startswith(f"the base has no {name}")
        assert "served with the base" in entry.note and "register" in entry.note


def test_the_files_of_issue_27_say_what_differs(tmp_path, base):
    """added_tokens.json with three tokens past SmolLM2's 49,152 rows, another EOS, another chat template."""
    adapter = handmade_adapter(tmp_path / "adapter", CAUSAL_LM)
    (base / "added_tokens.json").unlink()
    (adapter / "added_tokens.json").write_text(json.dumps({"<|tool|>": 49152, "<|call|>": 49153, "<|result|>": 49154}))
    (adapter / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}))
    (adapter / "tokenizer_config.json").write_text(
        json.dumps({**BASE_FILES["tokenizer_config.json"][0], "chat_template": "### {{ messages }}"})
    )
    got = findings(adapter, CAUSAL_LM, base)
    assert got["added_tokens.json"].startswith(
        "the base has no added_tokens.json, and this one declares <|call|>, <|result|>, <|tool|>; every adapter"
    )
    assert got["special_tokens_map.json"].startswith("differs from the base's copy in eos_token;")
    assert got["tokenizer_config.json"].startswith("differs from the base's copy in chat_template;")


@pytest.mark.parametrize("task", TASKS)
def test_a_file_no_task_lists_is_refused_unless_the_policy_allows_it(task, tmp_path, base):
    adapter = handmade_adapter(tmp_path / "adapter", task)
    (adapter / "notes.txt").write_text("trained on tuesday\n")
    (adapter / "checkpoint-10").mkdir()
    (adapter / "checkpoint-10" / "adapter_config.json").write_text("{}")
    got = findings(adapter, task, base)
    assert sorted(got) == ["checkpoint-10/adapter_config.json", "notes.txt"]
    assert got["notes.txt"].startswith(
        f"not a file a {task} adapter folder holds (adapter_config.json, adapter_model.safetensors, tokenizer.json"
    )
    assert got["notes.txt"].endswith("nothing would read it: remove it")
    assert sorted(findings(adapter, task, base, allow=("notes.txt",))) == ["checkpoint-10/adapter_config.json"]


def test_register_fetches_the_base_only_to_compare_and_names_every_file_refused(tmp_path, base):
    adapter = handmade_adapter(tmp_path / "adapter", CLASSIFICATION)

    def no_fetch(dst):
        raise AssertionError("the base is fetched only when the adapter ships a file to compare")

    refuse_unlisted_files(adapter, CLASSIFICATION, no_fetch)
    shutil.copy2(base / "vocab.txt", adapter / "vocab.txt")
    (adapter / "chat_template.jinja").write_text("{{ messages }}")

    def fetch(dst):
        return shutil.copytree(base, dst)

    with pytest.raises(BadCandidate) as e:
        refuse_unlisted_files(adapter, CLASSIFICATION, fetch)
    message = str(e.value)
    assert message.startswith(
        f"refusing to register {adapter}: 1 file(s) a classification adapter folder may not hold as they are: "
        "chat_template.jinja: a classifier generates no text"
    )
    _changed(adapter / "vocab.txt", BASE_FILES["vocab.txt"][0], "text")
    with pytest.raises(
        BadCandidate,
        match=r"2 file\(s\).*chat_template.jinja: .*; vocab.txt: differs from the base's copy in 1 of 4 lines, first at line 4",
    ):
        refuse_unlisted_files(adapter, CLASSIFICATION, fetch)


def test_each_task_declares_its_adapter_files():
    from modelcd_assets.lib.tasks.names import declaration_of

    for task in TASKS:
        assert declaration_of(task).adapter_files == adapter_files_of(task) and adapter_files_of(task)
        patterns = [f.pattern for f in adapter_files_of(task)]
        assert len(patterns) == len(set(patterns))


def test_modelcd_register_refuses_a_tokenizer_file_unlike_the_base_and_takes_the_base_own(modelcd_env, tiny_base, tmp_path, capsys):
    from modelcd_assets.cli import main

    modelcd_env.registry.register(tiny_base, "tiny-base", role="base")
    adapter = handmade_adapter(tmp_path / "adapter", CLASSIFICATION)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy2(tiny_base / name, adapter / name)
    capsys.readouterr()
    assert main(["register", str(adapter), "--name", "tiny-intent"]) == 0, capsys.readouterr().err

    (adapter / "added_tokens.json").write_text(json.dumps({"sku1": 30522, "sku2": 30523}))
    assert main(["register", str(adapter), "--name", "tiny-intent"]) == 2
    err = capsys.readouterr().err
    assert (
        "added_tokens.json: the base has no added_tokens.json, and this one declares sku1, sku2; the adapter is merged into its base" in err
    )
    assert "Traceback" not in err and [v.version for v in modelcd_env.registry.versions("tiny-intent")] == ["1"]
