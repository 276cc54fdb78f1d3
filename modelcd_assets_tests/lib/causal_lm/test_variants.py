"""The weight variants of a base build: each quantizes the FP32 twin's weight MatMuls as it says, leaves the LoRA slots
float, keeps llama.cpp's sensitive MatMuls at 8 bits where it mixes, and runs an adapter in ONNX Runtime GenAI."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelcd_assets.lib.causal_lm.build import MODEL_FILE
from modelcd_assets.lib.causal_lm.chats import chat_ids
from modelcd_assets.lib.causal_lm.decoder import Decoder
from modelcd_assets.lib.causal_lm.scoring import FidelityTally
from modelcd_assets.lib.causal_lm.variants import (
    LAST_MATMUL,
    MIXED_LAYERS,
    VARIANTS,
    Variant,
    eight_bit_matmuls,
    quantize_variant,
    variant_named,
)
from modelcd_assets.lib.demo.replies import chats
from modelcd_assets.lib.errors import ModelcdError


def _decoder_names(layers: int):
    """A graph of MatMul nodes named as the GenAI builder names a decoder with q/v LoRA slots, each with its weight."""
    nodes, inits = [], []
    names = [
        f"/model/layers.{i}/{part}/MatMul"
        for i in range(layers)
        for part in ("attn/q_proj", "attn/k_proj", "attn/v_proj", "attn/o_proj", "mlp/gate_proj", "mlp/up_proj", "mlp/down_proj")
    ]
    names += [f"/model/layers.{i}/attn/{t}/lora_{ab}/MatMul" for i in range(layers) for t in ("q_proj", "v_proj") for ab in "AB"]
    for k, name in enumerate([*names, "/lm_head/MatMul"]):
        inits.append(numpy_helper.from_array(np.zeros((4, 4), np.float32), f"w{k}"))
        nodes.append(helper.make_node("MatMul", ["x", f"w{k}"], [f"y{k}"], name=name))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    return helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)], inits)


def test_mixed_layers_are_llama_cpps_sensitive_value_and_down_projections_and_the_head():
    chosen = eight_bit_matmuls(_decoder_names(30), (LAST_MATMUL, MIXED_LAYERS))
    layers = sorted({int(n.split(".")[1].split("/")[0]) for n in chosen if n.startswith("/model/layers.")})
    # llama-quant.cpp's use_more_bits for 30 layers, in C++ integer arithmetic: i < 3, i >= 26, or (i - 3) % 3 == 2.
    assert layers == [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]
    assert "/lm_head/MatMul" in chosen
    assert all(n.endswith(("/v_proj/MatMul", "/down_proj/MatMul")) for n in chosen if n != "/lm_head/MatMul")
    assert not [n for n in chosen if "/lora_" in n]
    assert eight_bit_matmuls(_decoder_names(30), ()) == []


def test_an_unknown_variant_or_selector_or_an_eight_bit_k_quant_is_refused_by_name(tmp_path):
    with pytest.raises(ModelcdError, match="int3-magic.*int8, int4-rtn"):
        variant_named("int3-magic")
    with pytest.raises(ModelcdError, match="first_matmul"):
        eight_bit_matmuls(_decoder_names(2), ("first_matmul",))
    model = onnx.helper.make_model(_decoder_names(2), opset_imports=[onnx.helper.make_opsetid("", 21)])
    onnx.save(model, str(tmp_path / "fp32.onnx"))
    with pytest.raises(ModelcdError, match="k8.*k-quant makes 4-bit weights only"):
        quantize_variant(tmp_path / "fp32.onnx", tmp_path / "out" / "model.onnx", Variant("k8", "k_quant", 8), 4)


def _bits(folder):
    graph = onnx.load(str(folder / MODEL_FILE), load_external_data=False).graph
    out = {}
    for node in graph.node:
        attrs = {a.name: a.i for a in node.attribute}
        out[node.name] = (node.op_type, attrs.get("bits"), attrs.get("accuracy_level"))
    return out


def _block_sizes(folder):
    graph = onnx.load(str(folder / MODEL_FILE), load_external_data=False).graph
    return {n.name: a.i for n in graph.node for a in n.attribute if a.name == "block_size"}


@pytest.fixture(scope="module")
def variant_folders(tiny_lm, tmp_path_factory):
    import shutil

    root = tmp_path_factory.mktemp("variants")
    folders = {"int8": tiny_lm.build.int8}
    for name in [n for n in VARIANTS if n != "int8"]:
        out = root / name
        shutil.copytree(tiny_lm.build.int8, out, ignore=shutil.ignore_patterns(MODEL_FILE + "*"))
        made = quantize_variant(tiny_lm.build.fp32 / MODEL_FILE, out / MODEL_FILE, VARIANTS[name], 4)
        assert made["lora_float"] == 8  # 2 layers x (q, v) x (A, B)
        folders[name] = out
    return folders


def test_each_variant_quantizes_every_weight_matmul_at_its_widths_and_leaves_the_slots_float(variant_folders):
    for name, folder in variant_folders.items():
        ops = _bits(folder)
        lora = {n: v for n, v in ops.items() if "/lora_" in n}
        assert lora and all(op == "MatMul" for op, _, _ in lora.values()), name  # float32, as the FP32 twin's
        quantized = {n: v for n, v in ops.items() if v[0] == "MatMulNBits"}
        assert any(n.startswith("/lm_head/") for n in quantized), name
        assert {acc for _, _, acc in quantized.values()} == {4}, name  # every MatMul computes as the build's do
        assert {_block_sizes(folder)[n] for n in quantized} == {VARIANTS[name].block_size}, name
        eight = {n for n, (_, bits, _) in quantized.items() if bits == 8}
        if VARIANTS[name].bits == 8:
            assert eight == set(quantized), name
        elif VARIANTS[name].eight_bit:
            # 2 layers: none is below 2 // 8 == 0, layer 1 is at or above 7 * 2 // 8 == 1, neither is (i - 0) % 3 == 2.
            assert sorted(n.split("/MatMul")[0] for n in eight) == [
                "/lm_head",
                "/model/layers.1/attn/v_proj",
                "/model/layers.1/mlp/down_proj",
            ]
        else:
            assert eight == set(), name


def test_each_variant_runs_the_adapter_and_four_bits_lose_more_than_eight(tiny_lm, variant_folders, tmp_path):
    from modelcd_assets.lib.causal_lm.adapter_file import adapter_parameters, write_adapter_file

    params, _ = adapter_parameters(tiny_lm.adapter, tiny_lm.build.slots())
    adapter = write_adapter_file(params, tmp_path / "adapter.onnx_adapter")
    fp32 = Decoder(tiny_lm.build.fp32)
    fp32.load_adapter(adapter, "a")
    sequences = [chat_ids(fp32.encode_chat, c, fp32.eos_ids) for c in chats(12, 5)]
    reference = list(fp32.reply_logits(sequences, "a"))
    kl = {}
    for name, folder in variant_folders.items():
        decoder = Decoder(folder)
        decoder.load_adapter(adapter, "a")
        tally = FidelityTally()
        for q, f, (ids, first) in zip(decoder.reply_logits(sequences, "a"), reference, sequences):
            assert np.isfinite(q).all(), name
            tally.add(q, f, ids[first:])
        result = tally.result()
        kl[name] = result.mean_kl
        assert result.top1_agreement > 0.5, (name, result)
    assert 0 < kl["int8"] < kl["int4-rtn"]
