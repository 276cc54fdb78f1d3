import pytest

from modelcd_assets.lib.errors import BadCandidate
from modelcd_assets.lib.release.artifact import ADAPTER, FULL, inspect_artifact


def test_kinds(tiny_base, tiny_adapters):
    assert inspect_artifact(tiny_base).kind == FULL
    info = inspect_artifact(tiny_adapters["good"])
    assert info.kind == ADAPTER and info.declared_base == "models:/tiny-base/1"


@pytest.mark.parametrize(
    "files, message",
    [
        ({}, "neither a peft adapter folder"),
        ({"config.json": "{}", "pytorch_model.bin": ""}, "no model.safetensors"),
        ({"adapter_config.json": "{}"}, "no adapter_model.safetensors"),
        ({"adapter_config.json": "{nope", "adapter_model.safetensors": ""}, "not valid JSON"),
    ],
)
def test_malformed_folders_are_refused(tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(BadCandidate, match=message):
        inspect_artifact(tmp_path)


def test_not_a_folder(tmp_path):
    with pytest.raises(BadCandidate, match="is not a folder"):
        inspect_artifact(tmp_path / "missing")
