"""Each refusal on a crafted artifact; a clean artifact passes. Nothing in a candidate is ever executed."""

import json
import os
import pickle
import shutil
import struct

import pytest

from modelcd_assets.lib.judging.safety import SafetyLimits, scan_artifact


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


def test_a_handmade_adapter_passes(tmp_path):
    """What peft's save_pretrained writes for a LoRA adapter, without training one: the mutation run's stand-in for the test above."""
    import numpy as np
    from safetensors.numpy import save_file

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "r": 4, "base_model_name_or_path": "models:/tiny-base/1"})
    )
    save_file(
        {"lora_A.weight": np.zeros((4, 32), np.float32), "lora_B.weight": np.zeros((32, 4), np.float32)},
        str(adapter / "adapter_model.safetensors"),
    )
    (adapter / "README.md").write_text("# adapter\n")
    assert reasons(adapter) == []


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
    assert (
        "notes.csv: not an allowed file type (safetensors, JSON/config, tokenizer files, ONNX, text docs); "
        "remove it, or allow the pattern in the policy's safety.allow" in got
    )
    assert any(r.startswith("extra/stats.parquet: not an allowed file type") for r in got)
    assert reasons(clean, allow=("*.csv", "extra/*.parquet")) == []
    assert [r.split(":")[0] for r in reasons(clean, allow=("*.csv",))] == ["extra/stats.parquet"]


def test_the_policy_allow_list_reaches_the_scan(clean):
    from modelcd_assets.lib.judging.policy import Policy

    (clean / "notes.csv").write_text("a,b\n")
    policy = Policy.model_validate({"safety": {"allow": ["*.csv"]}})
    assert scan_artifact(clean, policy.safety.limits()) == []
    assert scan_artifact(clean, Policy().safety.limits()) != []


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("special_tokens_map.json", b"{nope", "not valid JSON"),
        ("vocab.txt", b"[PAD]\n\xff\xfe\n", "not UTF-8 text"),
        ("README.md", b"# card\0\0", "not UTF-8 text"),
        ("spiece.model", b"PK\x03\x04zip", "zip archive"),
        ("tokenizer.model", b"not a protobuf", "not a sentencepiece model"),
    ],
)
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


@pytest.mark.parametrize(
    "header, data_len, message",
    [
        (_tensors((0, 16)), 16 + 64, "64 trailing bytes after the last tensor"),
        (_tensors((0, 16), (32, 48)), 48, "16 unused bytes before tensor 't1'"),
        (_tensors((16, 32)), 32, "16 unused bytes before tensor 't0'"),
        (_tensors((0, 16), (8, 24)), 24, "tensors 't0' and 't1' overlap"),
        (_tensors((0, 16), (0, 16)), 16, "overlap"),
        ({}, 8, "8 trailing bytes"),
        ({**_tensors((0, 16)), "__metadata__": {"format": 1}}, 16, "__metadata__ is not a map of strings"),
    ],
)
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


def _onnx_model(folder, location, name="model.onnx", offset="0", length="64", internal_first=False):
    """An ONNX model whose one initializer (4x4 float32) lives in external data at location; nothing is written there.
    An offset or length of None leaves that key out; internal_first puts an ordinary initializer before it."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    w.data_location = onnx.TensorProto.EXTERNAL
    w.ClearField("raw_data")
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = w.external_data.add()
            entry.key, entry.value = key, value
    inits = [numpy_helper.from_array(np.ones(2, np.float32), "b"), w] if internal_first else [w]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"])], "g", [], [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 4])], inits
    )
    # Serialized by hand: onnx.save would itself act on the external-data entries.
    (folder / name).write_bytes(helper.make_model(graph).SerializeToString())


@pytest.mark.parametrize(
    "location", ["../../etc/passwd", "sub/../../x", "sub/../w.data", "/etc/passwd", "..\\..\\x", "C:\\w.data", "", "x" * 5000]
)
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


def _header_only(folder, header: dict, data: bytes = b"", limits=None):
    _rewrite_header(folder / "model.safetensors", header, data)
    return reasons(folder, **(limits or {}))


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"\0" * 7, "safetensors file is shorter than its 8-byte header length"),
        (struct.pack("<Q", 1 << 63), "safetensors header claims 9223372036854775808 bytes, over the 26214400 byte limit"),
        (struct.pack("<Q", 100) + b"{}" + b" " * 8, "safetensors header claims 100 bytes but the file has only 10 after the length"),
        (struct.pack("<Q", 2) + b"[]", "safetensors header is not a JSON object"),
    ],
)
def test_safetensors_headers_are_refused_with_the_reason(tmp_path, raw, message):
    (tmp_path / "model.safetensors").write_bytes(raw)
    assert reasons(tmp_path) == [f"model.safetensors: {message}"]


def test_an_empty_safetensors_header_is_invalid_json_not_short(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 0))
    assert reasons(tmp_path) == ["model.safetensors: safetensors header is not valid JSON (Expecting value: line 1 column 1 (char 0))"]


def test_a_header_of_exactly_the_limit_passes(tmp_path):
    _rewrite_header(tmp_path / "model.safetensors", {}, b"")
    size = (tmp_path / "model.safetensors").stat().st_size - 8
    assert reasons(tmp_path, max_safetensors_header_bytes=size) == []
    assert reasons(tmp_path, max_safetensors_header_bytes=size - 1) == [
        f"model.safetensors: safetensors header claims {size} bytes, over the {size - 1} byte limit"
    ]


@pytest.mark.parametrize(
    "info, message",
    [
        (5, "tensor 'w' has an unknown dtype 5"),
        ({"dtype": "EVIL", "shape": [1], "data_offsets": [0, 4]}, "tensor 'w' has an unknown dtype 'EVIL'"),
        ({"dtype": "F32", "shape": {}, "data_offsets": [0, 4]}, "tensor 'w' has an invalid shape {}"),
        ({"dtype": "F32", "shape": [2, -1], "data_offsets": [0, 4]}, "tensor 'w' has an invalid shape [2, -1]"),
        ({"dtype": "F32", "shape": [1], "data_offsets": [0, 4.0]}, "tensor 'w' has invalid data_offsets [0, 4.0]"),
        ({"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}, "tensor 'w' has invalid data_offsets [4, 0]"),
        ({"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}, "tensor 'w' has invalid data_offsets [0, 4, 8]"),
        ({"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}, "tensor 'w' has invalid data_offsets [-4, 0]"),
        ({"dtype": "F32", "shape": [2, 2], "data_offsets": [8, 16]}, "tensor 'w' spans 8 bytes, but F32[2, 2] needs 16"),
    ],
)
def test_each_tensor_entry_is_checked_with_the_reason(tmp_path, info, message):
    assert _header_only(tmp_path, {"w": info}, b"\0" * 16) == [f"model.safetensors: {message}"]


def test_metadata_must_map_strings_to_strings(tmp_path):
    assert _header_only(tmp_path, {"__metadata__": {"format": 1}}) == [
        "model.safetensors: safetensors __metadata__ is not a map of strings"
    ]


def test_an_empty_tensor_passes(tmp_path):
    assert (
        _header_only(
            tmp_path,
            {"e": {"dtype": "F32", "shape": [0, 4], "data_offsets": [0, 0]}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}},
            b"\0" * 4,
        )
        == []
    )


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("special_tokens_map.json", b"{nope", "not valid JSON"),
        ("config.json", b'{"auto_map": {}}', "declares auto_map (remote code); modelcd never sets trust_remote_code"),
        ("vocab.txt", b"[PAD]\n\xff\n", "not UTF-8 text; text docs and vocabularies must be plain text"),
        ("vocab.txt", b"[PAD]\ncaf\xc3", "not UTF-8 text; text docs and vocabularies must be plain text"),  # cut inside a character
        ("README.md", b"# card\0", "not UTF-8 text (NUL bytes); text docs and vocabularies must be plain text"),
        ("tokenizer.model", b"not a protobuf", "not a sentencepiece model (protobuf)"),
        ("model.pt", b"anything", "pickle-based weights can run code when loaded; convert to safetensors"),
        ("clf.joblib.gz", b"\x1f\x8b", "pickle-based weights can run code when loaded; convert to safetensors"),
        ("model.onnx", b"\xff\xff\xff garbage", "ONNX file does not parse (DecodeError)"),
    ],
)
def test_each_refusal_reads_as_documented(tmp_path, name, content, message):
    (tmp_path / name).write_bytes(content)
    assert reasons(tmp_path) == [f"{name}: {message}"]


def test_every_entry_is_scanned_after_a_link_out_of_the_folder(tmp_path):
    (tmp_path / "secret.txt").write_text("x")
    (tmp_path / "art").mkdir()
    os.symlink(tmp_path / "secret.txt", tmp_path / "art" / "a_link.txt")
    os.symlink("loop", tmp_path / "art" / "loop")
    (tmp_path / "art" / "config.json").write_text("{}")
    os.link(tmp_path / "art" / "config.json", tmp_path / "config-hardlink.json")
    (tmp_path / "art" / "z.pkl").write_bytes(b"\x80\x04")
    assert reasons(tmp_path / "art") == [
        f"a_link.txt: symlink points outside the candidate folder ({tmp_path / 'secret.txt'})",
        "config.json: hard link shared with 1 other path(s); copy the file instead",
        "loop: symlink points outside the candidate folder (loop)",  # a symlink loop does not resolve inside
        "z.pkl: pickle-based weights can run code when loaded; convert to safetensors",
    ]


def test_size_limits_are_inclusive_and_name_the_numbers(tmp_path):
    (tmp_path / "a.txt").write_text("x" * 10)
    (tmp_path / "b.txt").write_text("x" * 20)
    assert reasons(tmp_path, max_file_bytes=20, max_total_bytes=30, max_files=2) == []
    assert reasons(tmp_path, max_file_bytes=19, max_total_bytes=29, max_files=1) == [
        ".: 2 files, over the limit of 1",
        "b.txt: 20 bytes, over the per-file limit of 19",
        ".: 30 bytes in all, over the limit of 29",
    ]


def test_external_data_defaults_to_the_rest_of_its_file(tmp_path):
    (tmp_path / "w.data").write_bytes(b"\0" * 64)
    _onnx_model(tmp_path, "w.data", offset=None, length=None)
    assert reasons(tmp_path) == []
    _onnx_model(tmp_path, "w.data", offset="16", length=None)
    assert reasons(tmp_path) == []
    _onnx_model(tmp_path, "w.data", offset="64", length="0")
    assert reasons(tmp_path) == []


@pytest.mark.parametrize(
    "location, message",
    [
        (None, "external data location '' is empty or malformed"),
        ("w\0.data", "external data location 'w\\x00.data' is empty or malformed"),
        ("x" * 5000, f"external data location {'x' * 5000!r} cannot be checked (File name too long)"),
    ],
)
def test_malformed_external_data_locations_name_the_problem(tmp_path, location, message):
    _onnx_model(tmp_path, location)
    assert reasons(tmp_path) == [f"model.onnx: tensor 'w': {message}"]


def test_external_data_after_an_ordinary_initializer_is_checked(tmp_path):
    _onnx_model(tmp_path, "../w.data", internal_first=True)
    assert reasons(tmp_path) == ["model.onnx: tensor 'w': external data location '../w.data' escapes the candidate folder"]


def test_only_onnx_files_within_the_size_limit_vouch_for_external_data(tmp_path):
    (tmp_path / "onnx").mkdir()
    for name in ("a", "b"):
        (tmp_path / "onnx" / f"{name}.data").write_bytes(b"\0" * 64)
        _onnx_model(tmp_path / "onnx", f"{name}.data", name=f"{name}.onnx")
    largest = max(p.stat().st_size for p in (tmp_path / "onnx").glob("*.onnx"))
    assert largest >= 64 and reasons(tmp_path, max_file_bytes=largest) == []  # a model exactly at the limit is still read
    _onnx_model(tmp_path, "c.data", name="graph.pb")  # an ONNX model under another name reads nothing
    (tmp_path / "c.data").write_bytes(b"\0" * 64)
    assert [r.split(":")[0] for r in reasons(tmp_path)] == ["c.data", "graph.pb"]


def _onnx_naming(folder, locations, name="aux.onnx"):
    """An ONNX model with one external initializer per location (each reading its whole file); nothing is written there."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    inits = []
    for i, location in enumerate(locations):
        t = numpy_helper.from_array(np.ones(1, np.float32), f"t{i}")
        t.data_location = onnx.TensorProto.EXTERNAL
        t.ClearField("raw_data")
        entry = t.external_data.add()
        entry.key, entry.value = "location", location
        inits.append(t)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["t0"], ["y"])], "g", [], [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])], inits
    )
    (folder / name).write_bytes(helper.make_model(graph).SerializeToString())


def test_files_named_as_onnx_external_data_are_still_scanned_for_content(tmp_path):
    """Issue 17: an ONNX graph naming a file as external data used to exempt it from every content check."""
    import zipfile

    marker = tmp_path / "pwned"
    art = tmp_path / "art"
    art.mkdir()
    plant_pickle(art, marker, "weights.data")
    (art / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "x.Model"}}))
    with zipfile.ZipFile(art / "model.keras", "w") as z:
        z.writestr("config.json", "{}")
    (art / "model.safetensors").write_bytes(struct.pack("<Q", 100) + b"{}")
    expected = [
        "config.json: declares auto_map (remote code); modelcd never sets trust_remote_code",
        (
            "model.keras: content is a zip archive, which can run code when loaded, whatever the file is called; convert the weights to"
            " safetensors"
        ),
        "model.safetensors: safetensors header claims 100 bytes but the file has only 2 after the length",
        (
            "weights.data: content is a pickle, which can run code when loaded, whatever the file is called; convert the weights to"
            " safetensors"
        ),
    ]
    assert reasons(art) == expected
    _onnx_naming(art, ["weights.data", "config.json", "model.keras", "model.safetensors"])
    assert reasons(art) == expected
    assert reasons(art, allow=("*",)) == expected  # no pattern exempts code-running content named as external data
    assert not marker.exists()


def test_external_data_must_be_raw_tensor_data(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "w.safetensors").write_bytes(b"")
    _rewrite_header(tmp_path / "w.safetensors", {}, b"")
    (tmp_path / "notes.xyz").write_bytes(b"\0" * 4)
    _onnx_naming(tmp_path, ["tokenizer.json", "w.safetensors", "notes.xyz"])
    not_raw = (
        "named as ONNX external data, but external data must be raw tensor bytes in a file named *.data, *.onnx_data, *.weight, *.bias or"
        " without a suffix; rename it (and its location in the ONNX graph), or allow the pattern in the policy's safety.allow"
    )
    assert reasons(tmp_path) == [f"notes.xyz: {not_raw}", f"tokenizer.json: {not_raw}", f"w.safetensors: {not_raw}"]
    assert reasons(tmp_path, allow=("*.xyz",)) == [f"tokenizer.json: {not_raw}", f"w.safetensors: {not_raw}"]


def test_raw_external_data_under_its_usual_names_passes(tmp_path):
    names = ["model.onnx.data", "model.onnx_data", "encoder.layer.0.weight", "encoder.layer.0.bias", "onnx__MatMul_123"]
    for name in names:
        (tmp_path / name).write_bytes(b"\0" * 4)
    _onnx_naming(tmp_path, names)
    assert reasons(tmp_path) == []
    (tmp_path / "onnx__MatMul_123").write_bytes(b"\x7fELF\0\0\0\0")
    assert reasons(tmp_path) == [
        "onnx__MatMul_123: content is an executable, which can run code when loaded, whatever the file is called; "
        "convert the weights to safetensors"
    ]
