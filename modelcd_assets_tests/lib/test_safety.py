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


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "weights.pth", "x.pkl", "m.ckpt", "clf.joblib", "a.npy"])
def test_pickle_weights_are_refused_without_loading(clean, tmp_path, name):
    marker = tmp_path / "pwned"
    plant_pickle(clean, marker, name)
    assert any(name in r and "pickle" in r for r in reasons(clean))
    assert not marker.exists()


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


def test_onnx_external_data_escaping_the_folder_is_refused(clean, tmp_path):
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    w.data_location = onnx.TensorProto.EXTERNAL
    w.ClearField("raw_data")
    entry = w.external_data.add()
    entry.key, entry.value = "location", "../../etc/passwd"
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [], [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 4])], [w])
    onnx.save(helper.make_model(graph), str(clean / "model.onnx"))
    assert any("escapes the candidate folder" in r for r in reasons(clean))


def test_size_limits(clean):
    assert any("per-file limit" in r for r in reasons(clean, max_file_bytes=1000))
    assert any("in all, over the limit" in r for r in reasons(clean, max_total_bytes=1000))
    assert any("files, over the limit" in r for r in reasons(clean, max_files=2))
