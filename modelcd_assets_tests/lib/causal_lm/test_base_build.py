"""The base build: an INT8 decoder with LoRA slots and its FP32 twin, which with no adapter is the base itself."""

import json

import numpy as np
import onnx
import pytest
import torch

from modelcd_assets.lib.causal_lm.build import BaseBuild, BaseBuildOptions, build_base
from modelcd_assets.lib.causal_lm.chats import chat_ids
from modelcd_assets.lib.causal_lm.decoder import Decoder
from modelcd_assets.lib.demo.replies import chats
from modelcd_assets.lib.errors import BadCandidate


def _graph_ops(folder):
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    return {n.name: n.op_type for n in model.graph.node}, {i.name for i in model.graph.input}


def test_int8_quantizes_the_base_and_leaves_the_slots_as_float_inputs(tiny_lm):
    slots = tiny_lm.build.slots()
    assert slots.rank == 4 and slots.targets == ("q_proj", "v_proj") and len(slots.shapes) == 2 * 2 * 2  # layers x targets x (A, B)
    for folder in (tiny_lm.build.int8, tiny_lm.build.fp32):
        ops, inputs = _graph_ops(folder)
        assert set(slots.shapes) <= inputs
        # float32 MatMuls in both (lib/causal_lm/variants.py)
        assert all(op == "MatMul" for name, op in ops.items() if "/lora_" in name)
    int8_ops, _ = _graph_ops(tiny_lm.build.int8)
    fp32_ops, _ = _graph_ops(tiny_lm.build.fp32)
    assert "MatMulNBits" in int8_ops.values() and "MatMulNBits" not in fp32_ops.values()
    assert "GroupQueryAttention" in int8_ops.values()


def test_with_no_adapter_the_fp32_twin_is_the_base_in_torch(tiny_lm):
    from transformers import AutoModelForCausalLM

    decoder = Decoder(tiny_lm.build.fp32)
    ids, _ = chat_ids(decoder.encode_chat, chats(1, 3)[0], decoder.eos_ids)
    with torch.no_grad():
        ref = AutoModelForCausalLM.from_pretrained(str(tiny_lm.base)).eval()(torch.tensor([ids])).logits[0].numpy()
    assert np.abs(decoder.logits(ids) - ref).max() < 1e-4
    int8 = Decoder(tiny_lm.build.int8).logits(ids)
    assert 0 < np.abs(int8 - ref).max() < 0.5 and (int8.argmax(-1) == ref.argmax(-1)).mean() > 0.9


def test_a_made_build_is_reused_and_keyed_by_its_options(tiny_lm, tmp_path):
    made = json.loads((tiny_lm.build.dir / "build.json").read_text())
    assert made["options"]["rank"] == 4
    stamp = (tiny_lm.build.int8 / "model.onnx").stat().st_mtime_ns
    build_base(tiny_lm.base, tiny_lm.build, BaseBuildOptions(rank=4))
    assert (tiny_lm.build.int8 / "model.onnx").stat().st_mtime_ns == stamp
    assert BaseBuild.for_content(tmp_path, "h", BaseBuildOptions(rank=4)) != BaseBuild.for_content(tmp_path, "h", BaseBuildOptions(rank=8))
    assert BaseBuild.for_content(tmp_path, "h", BaseBuildOptions()) != BaseBuild.for_content(tmp_path, "g", BaseBuildOptions())


def test_targets_the_builder_has_no_slot_for_are_refused(tiny_lm, tmp_path):
    with pytest.raises(BadCandidate, match="no LoRA slot can be made for"):
        build_base(tiny_lm.base, BaseBuild(tmp_path / "b"), BaseBuildOptions(rank=4, targets=("embed_tokens",)))
    assert not (tmp_path / "b").exists()


def test_a_build_records_the_hash_of_its_int8_files(tiny_lm):
    from modelcd_assets.lib.hashing import folder_hash

    assert tiny_lm.build.recorded_int8_sha256 == folder_hash(tiny_lm.build.int8)
    assert BaseBuild(tiny_lm.build.dir / "nowhere").recorded_int8_sha256 is None
