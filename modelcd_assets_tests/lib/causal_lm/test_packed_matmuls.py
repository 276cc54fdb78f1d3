"""MatMulNBits that read the same activations are packed into one and a Split (lib/causal_lm/packed_matmuls.py): only
those that can be, and with the unpacked graph's logits to the bit, on 8-bit weights and on 4-bit ones with zero points."""

import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelcd_assets.lib.causal_lm import variants
from modelcd_assets.lib.causal_lm.adapter_file import adapter_parameters, write_adapter_file
from modelcd_assets.lib.causal_lm.build import MODEL_FILE
from modelcd_assets.lib.causal_lm.chats import chat_ids
from modelcd_assets.lib.causal_lm.decoder import Decoder
from modelcd_assets.lib.causal_lm.packed_matmuls import pack_shared_inputs
from modelcd_assets.lib.demo.replies import chats


def _nbits(name, x, n, k=8, bits=8, block=4, zero_points=False, g_idx=False, seed=0):
    """A MatMulNBits node reading x, and its initializers, each filled with values of its own."""
    blob, blocks = block * bits // 8, k // block
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.integers(0, 256, (n, blocks, blob), dtype=np.uint8), f"{name}.B"),
        numpy_helper.from_array(rng.random(n * blocks, dtype=np.float32), f"{name}.scales"),
    ]
    inputs = [x, f"{name}.B", f"{name}.scales"]
    if zero_points or g_idx:
        inputs.append(f"{name}.zp" if zero_points else "")
        if zero_points:
            inits.append(numpy_helper.from_array(rng.integers(0, 256, n * blocks, dtype=np.uint8), f"{name}.zp"))
    if g_idx:
        inputs.append(f"{name}.g_idx")
        inits.append(numpy_helper.from_array(np.arange(k, dtype=np.int32) // block, f"{name}.g_idx"))
    node = helper.make_node(
        "MatMulNBits", inputs, [f"{name}/out"], name=name, domain="com.microsoft", K=k, N=n, bits=bits, block_size=block
    )
    return node, inits


def _graph(specs):
    nodes, inits = [], []
    for seed, spec in enumerate(specs):
        node, made = _nbits(*spec[:3], **(spec[3] if len(spec) > 3 else {}), seed=seed)
        nodes.append(node)
        inits += made
    xs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 8]) for x in ("x", "y")]
    outs = [helper.make_tensor_value_info(n.output[0], TensorProto.FLOAT, None) for n in nodes]
    return helper.make_model(helper.make_graph(nodes, "g", xs, outs, inits))


def test_only_nodes_on_one_input_with_equal_attributes_and_inputs_are_packed_and_their_weights_go_with_them():
    model = _graph(
        [
            ("/l.0/attn/q_proj/MatMul_Q8", "x", 8),
            ("/l.0/attn/k_proj/MatMul_Q8", "x", 4),
            ("/l.0/attn/v_proj/MatMul_Q8", "x", 4),
            ("/l.0/attn/o_proj/MatMul_Q8", "y", 8),  # another input
            ("/l.0/mlp/gate_proj/MatMul_Q4", "y", 8, {"bits": 4}),  # another width
            ("/l.0/mlp/up_proj/MatMul_Q8", "y", 8, {"zero_points": True}),  # other inputs present
            ("/l.0/mlp/down_proj/MatMul_Q8", "x", 8, {"g_idx": True}),  # a g_idx maps K: never packed
        ]
    )
    before = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    packed = pack_shared_inputs(model)
    assert packed == [["/l.0/attn/q_proj/MatMul_Q8", "/l.0/attn/k_proj/MatMul_Q8", "/l.0/attn/v_proj/MatMul_Q8"]]
    graph = model.graph
    by_name = {n.name: n for n in graph.node}
    matmul, split = by_name["/l.0/attn/q_proj+k_proj+v_proj/MatMul_Q8"], by_name["/l.0/attn/q_proj+k_proj+v_proj/MatMul_Q8/Split"]
    assert {a.name: helper.get_attribute_value(a) for a in matmul.attribute}["N"] == 16
    assert list(split.output) == ["/l.0/attn/q_proj/MatMul_Q8/out", "/l.0/attn/k_proj/MatMul_Q8/out", "/l.0/attn/v_proj/MatMul_Q8/out"]
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    parts = ("q_proj", "k_proj", "v_proj")
    for k, kind in ((1, "B"), (2, "scales")):  # each node's own values, in the Split's order
        assert np.array_equal(inits[matmul.input[k]], np.concatenate([before[f"/l.0/attn/{p}/MatMul_Q8.{kind}"] for p in parts]))
    assert inits[split.input[1]].tolist() == [8, 4, 4]
    assert not [n for n in inits if n.startswith(tuple(f"/l.0/attn/{p}/" for p in parts))]
    assert {
        "/l.0/attn/o_proj/MatMul_Q8",
        "/l.0/mlp/gate_proj/MatMul_Q4",
        "/l.0/mlp/up_proj/MatMul_Q8",
        "/l.0/mlp/down_proj/MatMul_Q8",
    } < set(by_name)
    assert [n.op_type for n in graph.node].count("MatMulNBits") == 5
    assert pack_shared_inputs(model) == []  # nothing left to pack


def test_nodes_without_names_are_packed_by_what_they_read_and_no_other_node_is_lost():
    model = _graph([("a", "x", 8), ("b", "x", 4), ("c", "y", 8)])
    for node in model.graph.node:
        node.name = ""
    assert pack_shared_inputs(model) == [["", ""]]
    assert [n.op_type for n in model.graph.node] == ["MatMulNBits", "Split", "MatMulNBits"]
    assert list(model.graph.node[1].output) == ["a/out", "b/out"] and list(model.graph.node[2].output) == ["c/out"]


def _fp32_projections(k: int, widths: list[int]):
    """A float graph of MatMuls that read one input x [rows, k], with random weights."""
    rng = np.random.default_rng(7)
    nodes, inits, outs = [], [], []
    for j, n in enumerate(widths):
        inits.append(numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), f"w{j}"))
        nodes.append(helper.make_node("MatMul", ["x", f"w{j}"], [f"y{j}"], name=f"/model/layers.0/attn/p{j}/MatMul"))
        outs.append(helper.make_tensor_value_info(f"y{j}", TensorProto.FLOAT, None))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", k])
    graph = helper.make_graph(nodes, "g", [x], outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize(("bits", "symmetric"), [(8, True), (4, True), (4, False)])
def test_packed_products_are_the_unpacked_ones_with_an_odd_block_count(bits, symmetric):
    """K = 96 is three blocks of 32: a row of 4-bit zero points is padded to two bytes, and rows stacked stay in place."""
    import onnxruntime as ort
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(
        _fp32_projections(96, [64, 32, 32]), bits=bits, block_size=32, is_symmetric=symmetric, accuracy_level=4
    )
    quantizer.process()
    unpacked = quantizer.model.model
    packed = onnx.ModelProto()
    packed.CopyFrom(unpacked)
    assert len(pack_shared_inputs(packed)) == 1
    x = {"x": np.random.default_rng(3).standard_normal((5, 96)).astype(np.float32)}
    ys = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x) for m in (unpacked, packed)]
    assert len(ys[0]) == len(ys[1]) == 3
    for a, b in zip(*ys):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("variant", ["int8", "int4-rtn", "int4-rtn-asym-mixed", "int4-kquant-mixed", "int4-hqq-mixed"])
def test_a_packed_variant_computes_the_unpacked_logits_to_the_bit(tiny_lm, tmp_path, monkeypatch, variant):
    """8-bit and 4-bit weights without zero points, 4-bit with integer (round-to-nearest's and k-quant's) and with float
    (HQQ's) zero points, the mixed ones' 8-bit projections apart from the 4-bit ones they read beside."""
    folders = {}
    for packing in (True, False):
        out = tmp_path / f"packed-{packing}"
        shutil.copytree(tiny_lm.build.int8, out, ignore=shutil.ignore_patterns(MODEL_FILE + "*"))
        if not packing:
            monkeypatch.setattr(variants, "pack_shared_inputs", lambda model: [])
        made = variants.quantize_variant(tiny_lm.build.fp32 / MODEL_FILE, out / MODEL_FILE, variants.VARIANTS[variant], 4)
        monkeypatch.undo()
        assert bool(made["packed"]) == packing
        folders[packing] = out
    graph = onnx.load(str(folders[True] / MODEL_FILE), load_external_data=False).graph
    names = {n.name for n in graph.node if n.op_type == "MatMulNBits"}
    if not variants.VARIANTS[variant].eight_bit:  # 2 layers, each q+k+v and gate+up
        q = variants.VARIANTS[variant].bits
        assert {f"/model/layers.0/attn/q_proj+k_proj+v_proj/MatMul_Q{q}", f"/model/layers.1/mlp/gate_proj+up_proj/MatMul_Q{q}"} <= names
    else:  # layer 1's value projection is kept at 8 bits: the 4-bit query and key are packed without it
        assert {"/model/layers.1/attn/q_proj+k_proj/MatMul_Q4", "/model/layers.1/attn/v_proj/MatMul_Q8"} <= names

    params, _ = adapter_parameters(tiny_lm.adapter, tiny_lm.build.slots())
    adapter = write_adapter_file(params, tmp_path / "adapter.onnx_adapter")
    logits = {}
    for packing, folder in folders.items():
        decoder = Decoder(folder)
        decoder.load_adapter(adapter, "a")
        sequences = [chat_ids(decoder.encode_chat, c, decoder.eos_ids) for c in chats(6, 5)]
        logits[packing] = list(decoder.reply_logits(sequences, "a"))
        generation = decoder.generate(sequences[0][0][: sequences[0][1]], 12, "a")
        logits[packing].append(generation.first_logits)
        logits[packing].append(np.asarray(generation.tokens, np.float32))
    assert len(logits[True]) == len(logits[False]) == 8
    for packed, unpacked in zip(logits[True], logits[False]):
        assert np.array_equal(packed, unpacked)
