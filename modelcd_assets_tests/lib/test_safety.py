"""Each refusal on a crafted artifact; a clean artifact passes. Nothing in a candidate is ever executed."""

import json
import os
import pickle
import shutil
import struct

import pytest

from modelcd_assets.lib.safety import SafetyLimits, scan_artifact


class _Payload:
    """Unpickling this creates the marker file: proof that a pickle was loaded."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant_pickle(folder, marker, name="pytorch_model.bin"):
    (folder / name).write_bytes(pickle.dumps(_Payload(str(marker))))


@pytest.fixture
def clean(tiny_base, tmp_path):
    return shutil.copytree(tiny_base, tmp_path / "clean")


def reasons(folder, **limits):
    return [str(f) for f in scan_artifact(folder, SafetyLimits(**limits) if limits else SafetyLimits())]


def test_clean_model_and_adapter_pass(clean, tiny_adapters):
    assert reasons(clean) == []
    assert reasons(tiny_adapters["good"]) == []


def test_the_usual_companions_of_a_model_pass(clean):
    (clean / "README.md").write_text("# model card\n")
    (clean / "LICENSE").write_text("Apache-2.0\n")
    (clean / "merges.txt").write_text("#version: 0.2\nt h\n")
    (clean / "generation_config.json").write_text("{}")
    (clean / "modelcd_manifest.json").write_text("{}")
    (clean / "tokenizer.model").write_bytes(b"\x0a\x0b\x0a\x05<unk>\x15\x00\x00\x00\x00")
    assert reasons(clean) == []


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "weights.pth", "x.pkl", "m.ckpt", "clf.joblib", "a.npy"])
def test_pickle_weights_are_refused_without_loading(clean, tmp_path, name):
    marker = tmp_path / "pwned"
    plant_pickle(clean, marker, name)
    assert any(name in r and "pickle" in r for r in reasons(clean))
    assert not marker.exists()


@pytest.mark.parametrize("name", ["training_state.dat", "model.h5", "model.keras", "model.gguf", "optimizer.state"])
def test_a_pickle_under_any_other_name_is_refused_without_loading(clean, tmp_path, name):
    marker = tmp_path / "pwned"
    plant_pickle(clean, marker, name)
    assert any(r.startswith(f"{name}: ") and "pickle" in r for r in reasons(clean))
    assert any(r.startswith(f"{name}: ") and "pickle" in r for r in reasons(clean, allow=("*",)))  # no pattern exempts a pickle
    assert not marker.exists()


@pytest.mark.parametrize("name", ["config.json", "vocab.txt", "README.md", "tokenizer.model"])
def test_a_pickle_with_an_allowed_name_is_refused(clean, tmp_path, name):
    plant_pickle(clean, tmp_path / "pwned", name)
    assert any(r.startswith(f"{name}: ") for r in reasons(clean))


def test_unknown_file_types_are_refused_unless_the_policy_allows_them(clean):
    (clean / "notes.csv").write_text("a,b\n")
    (clean / "extra").mkdir()
    (clean / "extra" / "stats.parquet").write_bytes(b"PAR1\0\0PAR1")
    got = reasons(clean)
    assert ("notes.csv: not an allowed file type (safetensors, JSON/config, tokenizer files, ONNX, text docs); "
            "remove it, or allow the pattern in the policy's safety.allow") in got
    assert any(r.startswith("extra/stats.parquet: not an allowed file type") for r in got)
    assert reasons(clean, allow=("*.csv", "extra/*.parquet")) == []
    assert [r.split(":")[0] for r in reasons(clean, allow=("*.csv",))] == ["extra/stats.parquet"]


def test_the_policy_allow_list_reaches_the_scan(clean):
    from modelcd_assets.lib.policy import Policy

    (clean / "notes.csv").write_text("a,b\n")
    policy = Policy.model_validate({"safety": {"allow": ["*.csv"]}})
    assert scan_artifact(clean, policy.safety.limits()) == []
    assert scan_artifact(clean, Policy().safety.limits()) != []


@pytest.mark.parametrize("name, content, message", [
    ("special_tokens_map.json", b"{nope", "not valid JSON"),
    ("vocab.txt", b"[PAD]\n\xff\xfe\n", "not UTF-8 text"),
    ("README.md", b"# card\0\0", "not UTF-8 text"),
    ("spiece.model", b"PK\x03\x04zip", "zip archive"),
    ("tokenizer.model", b"not a protobuf", "not a sentencepiece model"),
])
def test_allowed_names_must_hold_what_their_type_says(clean, name, content, message):
    (clean / name).write_bytes(content)
    assert any(r.startswith(f"{name}: ") and message in r for r in reasons(clean))


def test_remote_code_is_refused(clean):
    (clean / "modeling_evil.py").write_text("import os\n")
    cfg = json.loads((clean / "config.json").read_text())
    cfg["auto_map"] = {"AutoModel": "modeling_evil.Evil"}
    (clean / "config.json").write_text(json.dumps(cfg))
    got = reasons(clean)
    assert any("modeling_evil.py" in r and "code files" in r for r in got)
    assert any("config.json" in r and "auto_map" in r for r in got)


def _rewrite_header(path, header: dict, data: bytes):
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


F32x4 = {"dtype": "F32", "shape": [4], "data_offsets": None}


def _tensors(*spans):
    return {f"t{i}": {**F32x4, "data_offsets": list(span)} for i, span in enumerate(spans)}


@pytest.mark.parametrize("header, data_len, message", [
    (_tensors((0, 16)), 16 + 64, "64 trailing bytes after the last tensor"),
    (_tensors((0, 16), (32, 48)), 48, "16 unused bytes before tensor 't1'"),
    (_tensors((16, 32)), 32, "16 unused bytes before tensor 't0'"),
    (_tensors((0, 16), (8, 24)), 24, "tensors 't0' and 't1' overlap"),
    (_tensors((0, 16), (0, 16)), 16, "overlap"),
    ({}, 8, "8 trailing bytes"),
    ({**_tensors((0, 16)), "__metadata__": {"format": 1}}, 16, "__metadata__ is not a map of strings"),
])
def test_safetensors_data_must_be_tiled_exactly(clean, header, data_len, message):
    st = clean / "model.safetensors"
    _rewrite_header(st, header, b"\0" * data_len)
    assert any(r.startswith("model.safetensors: ") and message in r for r in reasons(clean))
    # The loader itself refuses the same files: the scan is no stricter than safetensors.
    from safetensors import SafetensorError, safe_open

    with pytest.raises(SafetensorError):
        with safe_open(str(st), "np") as f:
            [f.get_tensor(k) for k in f.keys()]


def test_exactly_tiled_safetensors_pass(clean):
    _rewrite_header(clean / "model.safetensors", {**_tensors((16, 32), (0, 16)), "__metadata__": {"format": "pt"}}, b"\0" * 32)
    assert reasons(clean) == []


def test_corrupt_oversized_and_truncated_safetensors(clean):
    st = clean / "model.safetensors"
    original = st.read_bytes()
    st.write_bytes(original[: len(original) // 2])
    assert any("truncated" in r for r in reasons(clean))
    st.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    assert any("over the" in r and "header" in r for r in reasons(clean))
    st.write_bytes(struct.pack("<Q", 5) + b"{nope")
    assert any("not valid JSON" in r for r in reasons(clean))
    _rewrite_header(st, {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 8]}}, b"\0" * 16)
    assert any("needs 16" in r for r in reasons(clean))
    _rewrite_header(st, {"w": {"dtype": "EVIL", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4)
    assert any("unknown dtype" in r for r in reasons(clean))


def test_links_out_of_the_folder_are_refused(clean, tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("x")
    os.symlink(outside, clean / "vocab_link.txt")
    os.link(clean / "config.json", tmp_path / "config-hardlink.json")
    got = reasons(clean)
    assert any("symlink points outside" in r for r in got)
    assert any("hard link" in r for r in got)


def test_symlinks_inside_the_folder_are_judged_by_their_name(clean):
    os.symlink("config.json", clean / "modeling_evil.py")
    os.symlink("config.json", clean / "weights.dat")
    os.symlink("config.json", clean / "config_copy.json")
    got = reasons(clean)
    assert any(r.startswith("modeling_evil.py: code files") for r in got)
    assert any(r.startswith("weights.dat: not an allowed file type") for r in got)
    assert not any(r.startswith("config_copy.json") for r in got)


def test_pipes_and_dangling_links_are_refused(clean):
    os.mkfifo(clean / "notes.txt")  # reading it would block the scan
    os.symlink("missing.json", clean / "dangling.json")
    got = reasons(clean)
    assert any(r.startswith("notes.txt: not a regular file") for r in got)
    assert any(r.startswith("dangling.json: not a regular file") for r in got)


def _onnx_model(folder, location, name="model.onnx", offset="0", length="64"):
    """An ONNX model whose one initializer (4x4 float32) lives in external data at location; nothing is written there."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    w.data_location = onnx.TensorProto.EXTERNAL
    w.ClearField("raw_data")
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [], [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 4])], [w])
    # Serialized by hand: onnx.save would itself act on the external-data entries.
    (folder / name).write_bytes(helper.make_model(graph).SerializeToString())


@pytest.mark.parametrize("location", ["../../etc/passwd", "sub/../../x", "sub/../w.data", "/etc/passwd", "..\\..\\x", "C:\\w.data", "", "x" * 5000])
def test_onnx_external_data_escaping_the_folder_is_refused(clean, location):
    (clean / "sub").mkdir()
    (clean / "w.data").write_bytes(b"\0" * 64)
    _onnx_model(clean, location)
    assert any(r.startswith("model.onnx: tensor 'w': external data location") for r in reasons(clean))


def test_onnx_external_data_through_a_symlink_is_refused(clean, tmp_path):
    (tmp_path / "secret").write_bytes(b"\0" * 64)
    (clean / "w.data").write_bytes(b"\0" * 64)
    os.symlink(tmp_path / "secret", clean / "out.data")
    os.symlink("w.data", clean / "in.data")
    os.symlink(tmp_path, clean / "outdir")
    for location in ("out.data", "in.data", "outdir/secret"):
        _onnx_model(clean, location)
        assert any(r.startswith("model.onnx: ") and "goes through a symlink" in r for r in reasons(clean)), location


def test_onnx_with_its_external_data_passes_and_unreferenced_data_does_not(clean):
    import numpy as np
    import onnxruntime as ort

    (clean / "onnx").mkdir()
    (clean / "onnx" / "model.onnx.data").write_bytes(np.full(16, 2.0, np.float32).tobytes())
    _onnx_model(clean / "onnx", "model.onnx.data")
    assert reasons(clean) == []
    assert ort.InferenceSession(str(clean / "onnx" / "model.onnx")).run(None, {})[0].sum() == 32.0  # what passed does load
    (clean / "onnx" / "stale.onnx.data").write_bytes(b"\0" * 64)
    assert [r.split(":")[0] for r in reasons(clean)] == ["onnx/stale.onnx.data"]


@pytest.mark.parametrize("offset, length, message", [("32", "64", "runs past"), ("x", "64", "non-integer"), ("0", "-1", "runs past")])
def test_onnx_external_data_must_fit_its_file(clean, offset, length, message):
    (clean / "w.data").write_bytes(b"\0" * 64)
    _onnx_model(clean, "w.data", offset=offset, length=length)
    assert any(r.startswith("model.onnx: ") and message in r for r in reasons(clean))


def test_size_limits(clean):
    assert any("per-file limit" in r for r in reasons(clean, max_file_bytes=1000))
    assert any("in all, over the limit" in r for r in reasons(clean, max_total_bytes=1000))
    assert any("files, over the limit" in r for r in reasons(clean, max_files=2))
