"""Adapter files: a peft adapter on the INT8 base's slots is the adapter unmerged in torch; a misfit is reported."""

import json

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file

from modelcd_assets.lib.causal_lm.adapter_file import ADAPTER_CONFIG, ADAPTER_WEIGHTS, adapter_parameters, write_adapter_file
from modelcd_assets.lib.causal_lm.chats import chat_ids
from modelcd_assets.lib.causal_lm.decoder import Decoder
from modelcd_assets.lib.causal_lm.training import LmTraining
from modelcd_assets.lib.demo.replies import chats
from modelcd_assets.lib.errors import BadCandidate


def _torch_peft_logits(base, adapter, ids):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base)), str(adapter)).eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def test_the_adapter_on_the_fp32_twin_is_torch_plus_peft_and_switches_by_name(tiny_lm, tmp_path):
    params, fit = adapter_parameters(tiny_lm.adapter, tiny_lm.build.slots())
    assert fit.problems == [] and fit.slots_filled == len(tiny_lm.build.slots().shapes) == len(params)
    path = write_adapter_file(params, tmp_path / "a.onnx_adapter")
    decoder = Decoder(tiny_lm.build.fp32)
    decoder.load_adapter(path, "a")
    ids, _ = chat_ids(decoder.encode_chat, chats(1, 4)[0], decoder.eos_ids)
    ref = _torch_peft_logits(tiny_lm.base, tiny_lm.adapter, ids)
    assert np.abs(decoder.logits(ids, "a") - ref).max() < 1e-4
    base_logits = decoder.logits(ids)
    assert np.abs(base_logits - ref).max() > 1e-3  # the adapter changes outputs; no adapter is the base again
    assert np.abs(decoder.logits(ids, "a") - ref).max() < 1e-4


def _copy_adapter(src, dst, config_change=None, weights_change=None):
    dst.mkdir()
    config = json.loads((src / ADAPTER_CONFIG).read_text()) | (config_change or {})
    (dst / ADAPTER_CONFIG).write_text(json.dumps(config))
    weights = load_file(str(src / ADAPTER_WEIGHTS))
    save_file(weights_change(weights) if weights_change else weights, str(dst / ADAPTER_WEIGHTS))
    return dst


def test_an_adapter_of_another_rank_or_targets_is_reported(tiny_lm):
    other_rank = tiny_lm.train("rank8", LmTraining(steps=1, rank=8, alpha=16))
    params, fit = adapter_parameters(other_rank, tiny_lm.build.slots())
    assert params == {} and any("rank 8" in p and "r=4" in p for p in fit.problems)
    other_targets = tiny_lm.train("qk", LmTraining(steps=1, rank=4, alpha=8, targets=("q_proj", "k_proj")))
    params, fit = adapter_parameters(other_targets, tiny_lm.build.slots())
    assert params == {} and any("target_modules=['q_proj', 'v_proj']" in p for p in fit.problems)


def test_an_adapter_of_another_hidden_size_is_reported(tiny_lm, tmp_path):
    def wider(weights):
        return {k: np.zeros((v.shape[0], v.shape[1] * 2), v.dtype) if "lora_A" in k else v for k, v in weights.items()}

    params, fit = adapter_parameters(_copy_adapter(tiny_lm.adapter, tmp_path / "wide", weights_change=wider), tiny_lm.build.slots())
    assert params == {} and any("another hidden size" in p for p in fit.problems)


def test_extra_trained_modules_and_dora_are_reported(tiny_lm, tmp_path):
    extra = _copy_adapter(
        tiny_lm.adapter,
        tmp_path / "extra",
        {"modules_to_save": ["lm_head"]},
        lambda w: w | {"base_model.model.lm_head.modules_to_save.default.weight": np.zeros((2, 2), np.float32)},
    )
    _, fit = adapter_parameters(extra, tiny_lm.build.slots())
    assert any("modules_to_save" in p for p in fit.problems) and any("fill no slot" in p for p in fit.problems)
    _, fit = adapter_parameters(_copy_adapter(tiny_lm.adapter, tmp_path / "dora", {"use_dora": True}), tiny_lm.build.slots())
    assert any("DoRA" in p for p in fit.problems)


def test_a_folder_that_is_no_adapter_is_refused(tiny_lm, tmp_path):
    with pytest.raises(BadCandidate, match="not a peft LoRA adapter"):
        adapter_parameters(tmp_path, tiny_lm.build.slots())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_an_adapter_saved_as_bf16_or_fp16_is_read_and_widened_exactly(tiny_lm, tmp_path, dtype):
    from safetensors.torch import load_file as load_torch
    from safetensors.torch import save_file as save_torch

    folder = tmp_path / str(dtype)
    folder.mkdir()
    (folder / ADAPTER_CONFIG).write_text((tiny_lm.adapter / ADAPTER_CONFIG).read_text())
    weights = {k: v.to(dtype) for k, v in load_torch(str(tiny_lm.adapter / ADAPTER_WEIGHTS)).items()}
    save_torch(weights, str(folder / ADAPTER_WEIGHTS))
    params, fit = adapter_parameters(folder, tiny_lm.build.slots())
    full, _ = adapter_parameters(tiny_lm.adapter, tiny_lm.build.slots())
    assert fit.problems == [] and params.keys() == full.keys()
    slots = tiny_lm.build.slots()
    for key, slot in ((slots.peft_key(s), s) for s in slots.shapes):
        want = weights[key].float().numpy().T * (np.float32(fit.scaling) if ".lora_B." in key else np.float32(1))
        assert params[slot].dtype == np.float32 and np.array_equal(params[slot], want)
    # float16 keeps 10 mantissa bits, bfloat16 7: the same adapter to within their rounding
    assert max(np.abs(params[s] - full[s]).max() / np.abs(full[s]).max() for s in full) < 2**-7


def test_the_scan_counts_subnormal_nan_and_inf_served_values_per_tensor(tmp_path):
    from modelcd_assets.lib.causal_lm.adapter_file import scan_adapter_file

    clean = scan_adapter_file(
        write_adapter_file({"a": np.ones((2, 3), np.float32), "b": np.zeros(4, np.float32)}, tmp_path / "clean.onnx_adapter")
    )
    assert clean == {"file": "clean.onnx_adapter", "tensors": 2, "values": 10, "subnormal": 0, "nan": 0, "inf": 0, "per_tensor": {}}
    tiny = np.finfo(np.float32).tiny
    bad = np.array([1e-39, -1e-40, tiny, -tiny, 0.0, np.nan, np.inf, -np.inf], np.float32)  # tiny itself is the smallest normal
    scan = scan_adapter_file(write_adapter_file({"a": np.ones(3, np.float32), "b": bad}, tmp_path / "bad.onnx_adapter"))
    assert (scan["subnormal"], scan["nan"], scan["inf"], scan["values"]) == (2, 1, 2, 11)
    assert scan["per_tensor"] == {"b": {"subnormal": 2, "nan": 1, "inf": 2}}
