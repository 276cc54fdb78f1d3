"""Health gates: a crafted artifact fails its gate, and a clean one passes every health gate."""

import json
import math
import shutil

import pytest
from safetensors.torch import load_file, save_file

from modelcd_assets.lib.classifier.health import measure
from modelcd_assets.lib.classifier.model_io import merge_adapter
from modelcd_assets.lib.classifier.training import Training, train_adapter
from modelcd_assets.lib.judging import gates
from modelcd_assets.lib.release.artifact import ADAPTER, FULL

HEALTH_GATES = (
    gates.judge_weights_finite,
    gates.judge_loads_cleanly,
    gates.judge_adapter_fits_base,
    gates.judge_adapter_changes_outputs,
    gates.judge_tokenizer,
    gates.judge_probe,
    gates.judge_gradients,
)


def verdicts(report):
    return {v.gate: v for v in (judge(report) for judge in HEALTH_GATES)}


def full(folder, reference=None, declared=False):
    return verdicts(measure(folder, FULL, folder, None, None, reference, declared))


def _edit_weights(src, dst, edit):
    shutil.copytree(src, dst)
    w = load_file(str(dst / "model.safetensors"))
    edit(w)
    save_file(w, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


def test_clean_full_model_and_adapter_pass(tiny_trained, tiny_adapters, tmp_path):
    assert {g: v.status for g, v in full(tiny_trained, tiny_trained).items()} == dict.fromkeys(
        verdicts(measure(tiny_trained, FULL, tiny_trained, None, None, None, False)), "pass"
    )
    merged = tmp_path / "merged"
    merge_adapter(tiny_trained, tiny_adapters["good"], merged)
    got = verdicts(measure(merged, ADAPTER, tiny_adapters["good"], tiny_trained, "models:/tiny-base/1", tiny_trained, False))
    assert {v.status for v in got.values()} == {"pass"}, {g: v.reason for g, v in got.items()}
    assert got["adapter_fits_base"].numbers["modules_matched"] == 4


def test_nan_in_a_weight_fails_weights_finite(tiny_trained, tmp_path):
    def poison(w):  # the last position row: never used by short inputs, so only the weight scan can see it
        w["bert.embeddings.position_embeddings.weight"][-1, 0] = math.nan

    got = full(_edit_weights(tiny_trained, tmp_path / "nan", poison))
    assert got["weights_finite"].status == "fail"
    assert "position_embeddings" in got["weights_finite"].reason


def test_missing_head_and_unexpected_keys_fail_loads_cleanly(tiny_trained, tmp_path):
    got = full(_edit_weights(tiny_trained, tmp_path / "headless", lambda w: w.pop("classifier.weight")))
    assert got["loads_cleanly"].status == "fail" and "classifier.weight" in got["loads_cleanly"].reason

    import torch

    got = full(_edit_weights(tiny_trained, tmp_path / "extra", lambda w: w.__setitem__("bert.extra.weight", torch.zeros(2))))
    assert got["loads_cleanly"].status == "fail" and "unexpected" in got["loads_cleanly"].reason


def test_untrained_adapter_is_output_identical_and_refused(tiny_trained, tmp_path):
    adapter = train_adapter(tiny_trained, [], tmp_path / "noop", Training(steps=0, rank=4, alpha=8), "models:/tiny-base/1")
    merged = tmp_path / "merged"
    merge_adapter(tiny_trained, adapter, merged)
    got = verdicts(measure(merged, ADAPTER, adapter, tiny_trained, "models:/tiny-base/1", tiny_trained, False))
    assert got["adapter_changes_outputs"].status == "fail"


def test_adapter_declaring_another_base_is_refused(tiny_trained, tiny_adapters, tmp_path):
    merged = tmp_path / "merged"
    merge_adapter(tiny_trained, tiny_adapters["good"], merged)
    got = verdicts(measure(merged, ADAPTER, tiny_adapters["good"], tiny_trained, "models:/other-base/3", tiny_trained, False))
    assert got["adapter_fits_base"].status == "fail" and "models:/other-base/3" in got["adapter_fits_base"].reason


@pytest.fixture
def grown_tokenizer(tiny_trained, tmp_path):
    from modelcd_assets.lib.classifier.model_io import load_tokenizer

    folder = shutil.copytree(tiny_trained, tmp_path / "grown")
    tok = load_tokenizer(folder)
    tok.add_tokens([f"newtoken{i}" for i in range(10)] + ["emoji"])
    tok.save_pretrained(str(folder))
    return folder


def test_tokenizer_larger_than_embeddings_fails(grown_tokenizer, tiny_trained):
    cfg = json.loads((grown_tokenizer / "config.json").read_text())
    got = full(grown_tokenizer, tiny_trained, declared=True)
    assert got["tokenizer"].status == "fail" and f"{cfg['vocab_size']} rows" in got["tokenizer"].reason


def test_changed_token_ids_need_a_declared_change(tiny_trained, tmp_path):
    from modelcd_assets.lib.classifier.model_io import load_tokenizer

    folder = shutil.copytree(tiny_trained, tmp_path / "cased")
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg["do_lower_case"] = False
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    tok_json = json.loads((folder / "tokenizer.json").read_text())
    tok_json["normalizer"]["lowercase"] = False
    (folder / "tokenizer.json").write_text(json.dumps(tok_json))
    assert load_tokenizer(folder)("MIXED")["input_ids"] != load_tokenizer(tiny_trained)("MIXED")["input_ids"]
    assert full(folder, tiny_trained)["tokenizer"].status == "fail"
    assert full(folder, tiny_trained, declared=True)["tokenizer"].status == "pass"


def test_rank_and_module_mismatches_fail_adapter_fit(tiny_trained, tiny_adapters, tmp_path):
    from safetensors.torch import load_file as load_tensors
    from safetensors.torch import save_file as save_tensors

    from modelcd_assets.lib.classifier.health import _loading_info, adapter_fit

    base, info = _loading_info(tiny_trained)
    wrong_rank = shutil.copytree(tiny_adapters["good"], tmp_path / "rank")
    cfg = json.loads((wrong_rank / "adapter_config.json").read_text())
    cfg["r"] = 16
    (wrong_rank / "adapter_config.json").write_text(json.dumps(cfg))
    fit = adapter_fit(wrong_rank, base, info["missing_keys"], "models:/tiny-base/1")
    assert any("expected" in p and "rank 16" in p for p in fit["shape_problems"])

    nowhere = shutil.copytree(tiny_adapters["good"], tmp_path / "nowhere")
    w = load_tensors(str(nowhere / "adapter_model.safetensors"))
    w = {k.replace(".query.", ".nonexistent.").replace(".value.", ".nonexistent2."): v for k, v in w.items()}
    save_tensors(w, str(nowhere / "adapter_model.safetensors"))
    fit = adapter_fit(nowhere, base, info["missing_keys"], "models:/tiny-base/1")
    assert fit["modules_matched"] == 0
    report = {"adapter": fit | {"max_output_change": 1.0}}
    verdict = gates.judge_adapter_fits_base(report)
    assert verdict.status == "fail" and "matches no module" in verdict.reason


def test_nan_in_a_used_weight_fails_probe_and_gradients(tiny_trained, tmp_path):
    def poison(w):
        w["classifier.weight"][0, 0] = math.nan

    got = full(_edit_weights(tiny_trained, tmp_path / "nan-head", poison))
    assert got["weights_finite"].status == "fail"
    assert got["probe"].status == "fail" and "NaN" in got["probe"].reason
    assert got["gradients"].status == "fail"


def test_weight_scale_blowup_is_judged_against_production(tmp_path):
    """A head scaled x100 keeps every label and passes parity; only its scale against production gives it away."""
    import torch
    from safetensors.torch import save_file

    from modelcd_assets.lib.classifier.health import weight_scale
    from modelcd_assets.lib.judging.gates import judge_weight_scale
    from modelcd_assets.lib.judging.policy import HealthPolicy

    prod, clean, blown = (tmp_path / n for n in ("prod", "clean", "blown"))
    weights = {"classifier.weight": torch.randn(4, 32), "classifier.bias": torch.zeros(4), "encoder.w": torch.randn(32, 32)}
    for folder, head in ((prod, 1.0), (clean, 1.3), (blown, 100.0)):
        folder.mkdir()
        save_file({k: v * head if k.startswith("classifier") else v for k, v in weights.items()}, str(folder / "model.safetensors"))
    ok = judge_weight_scale({"weight_scale_vs_production": weight_scale(clean, prod)}, HealthPolicy())
    assert ok.status == "pass" and ok.numbers["matrices"] == 2  # biases are not compared
    bad = judge_weight_scale({"weight_scale_vs_production": weight_scale(blown, prod)}, HealthPolicy())
    assert bad.status == "fail" and "classifier.weight is 100x production's norm" in bad.reason
    nan = judge_weight_scale({"weight_scale_vs_production": {"w": float("nan")}}, HealthPolicy())
    assert nan.status == "fail" and nan.reason == "w has a non-finite norm, not comparable"
    assert judge_weight_scale({}, HealthPolicy()).status == "pass"  # first candidate: nothing to compare, and it says so
