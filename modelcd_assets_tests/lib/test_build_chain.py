"""Merge, export, fuse and quantize a tiny model: parity and fidelity are measured, not assumed."""

import numpy as np
import pytest

from modelcd_assets.lib.classifier.export import check_parity, export_onnx, torch_logits
from modelcd_assets.lib.classifier.model_io import merge_adapter
from modelcd_assets.lib.demo.tickets import generate
from modelcd_assets.lib.errors import BadCandidate
from modelcd_assets.lib.inference.evaluate import predict
from modelcd_assets.lib.inference.quantize import choose_variant, optimize_transformer, quantize_dynamic_int8, quantize_static_int8
from modelcd_assets.lib.inference.runtime import OnnxModel, logits, session
from modelcd_assets.lib.inference.tokens import encode


@pytest.fixture(scope="module")
def chain(tiny_trained, tiny_adapters, tmp_path_factory):
    root = tmp_path_factory.mktemp("chain")
    merged = root / "merged"
    merge_adapter(tiny_trained, tiny_adapters["worse"], merged)
    onnx = export_onnx(merged, root / "model.onnx")
    fused = optimize_transformer(onnx, root / "opt.onnx", merged / "config.json")
    texts = [e.text for e in generate(300, 9)]
    feeds = encode(merged, texts, root / "tokens")
    calib = encode(merged, [e.text for e in generate(64, 10)])
    return {"merged": merged, "onnx": onnx, "opt": root / "opt.onnx", "fused": fused, "feeds": feeds, "calib": calib, "root": root}


def test_merged_adapter_changes_outputs_and_export_matches_torch(chain, tiny_trained):
    feeds = chain["feeds"]
    merged = torch_logits(chain["merged"], feeds)
    base = torch_logits(tiny_trained, feeds)
    assert np.abs(merged - base).max() > 1e-3
    assert check_parity(merged, logits(session(chain["onnx"]), feeds)) < 1e-4


def test_parity_check_fails_on_disagreement():
    with pytest.raises(BadCandidate, match="disagrees with torch"):
        check_parity(np.zeros((2, 4)), np.full((2, 4), 1e-2))


def test_fusion_and_int8_variants(chain):
    assert chain["fused"].get("Attention", 0) == 2 and chain["fused"].get("SkipLayerNormalization", 0) >= 2
    static = quantize_static_int8(chain["opt"], chain["root"] / "s.onnx", chain["calib"])
    dynamic = quantize_dynamic_int8(chain["opt"], chain["root"] / "d.onnx")
    fp32 = predict(chain["onnx"], chain["feeds"])
    for path in (static, dynamic):
        agreement = np.mean(predict(path, chain["feeds"]) == fp32)
        assert agreement > 0.9, (path, agreement)


def test_a_batch_dependent_graph_is_run_one_text_per_call_so_its_outputs_do_not_depend_on_the_batch(chain):
    """Dynamic INT8 scales activations over the whole call: batched, a text's logits change with its neighbours."""
    static = quantize_static_int8(chain["opt"], chain["root"] / "s1.onnx", chain["calib"])
    dynamic = quantize_dynamic_int8(chain["opt"], chain["root"] / "d1.onnx")
    feeds = {k: v[:64] for k, v in chain["feeds"].items()}
    alone = {p: logits(session(p), feeds, 1) for p in (chain["onnx"], static, dynamic)}
    assert np.abs(logits(session(dynamic), feeds, 32) - alone[dynamic]).max() > 1e-4  # the defect, measured raw
    for path, dependent in ((chain["onnx"], False), (static, False), (dynamic, True)):
        model = OnnxModel(path)
        assert model.batch_dependent is dependent and model.batch(32) == (1 if dependent else 32)
        assert np.abs(model.logits(feeds, 32) - alone[path]).max() < 1e-5, path
    # A recorded answer is taken as given (the server passes the one recorded at gating instead of re-reading the graph).
    assert OnnxModel(static, batch_dependent=True).batch(32) == 1


def test_tokenization_is_cached_by_content(chain):
    texts = ["one ticket", "another ticket"]
    a = encode(chain["merged"], texts, chain["root"] / "tokens")
    files = set((chain["root"] / "tokens").glob("*.npz"))
    b = encode(chain["merged"], texts, chain["root"] / "tokens")
    assert set((chain["root"] / "tokens").glob("*.npz")) == files
    assert all((a[k] == b[k]).all() for k in a)


def test_choose_variant_prefers_fast_and_faithful():
    variants = {"static": {"top1_agreement": 0.995, "items_per_s": 300.0}, "dynamic": {"top1_agreement": 0.999, "items_per_s": 250.0}}
    assert choose_variant(variants, 0.99)[0] == "static"
    assert choose_variant(variants, 0.998)[0] == "dynamic"
    name, why = choose_variant(variants, 0.9999)
    assert name == "static" and "no variant reaches" in why


def test_choose_variant_treats_a_timing_tie_as_a_tie():
    close = {"static": {"top1_agreement": 0.998, "items_per_s": 303.0}, "dynamic": {"top1_agreement": 0.998, "items_per_s": 300.0}}
    name, why = choose_variant(close, 0.99)
    assert name == "dynamic" and "within 5% of the fastest" in why
    close["static"]["top1_agreement"] = 0.999
    assert choose_variant(close, 0.99)[0] == "static"


def test_one_input_length_for_gates_and_server(chain):
    """The gates cut inputs where the server does (they used to judge 64 tokens while the server served 128)."""
    from modelcd_assets.lib.inference.tokens import MAX_LENGTH, TextEncoder, truncation_length

    long_text = " ".join(["refund"] * 400)
    cut = truncation_length(chain["merged"])
    assert 0 < cut <= MAX_LENGTH
    gated = encode(chain["merged"], [long_text, "short"])
    served = TextEncoder(chain["merged"]).encode([long_text, "short"])
    assert gated["input_ids"].shape[1] == cut
    assert (gated["input_ids"] == served["input_ids"]).all()


def test_length_buckets_give_the_logits_of_one_text_at_a_time(chain):
    """Padding only to the longest of each batch changes nothing an FP32 model computes, whatever the batch holds."""
    feeds = chain["feeds"]
    sess = session(chain["onnx"])
    one_by_one = np.concatenate(
        [logits(sess, {k: v[i : i + 1, : int(feeds["attention_mask"][i].sum())] for k, v in feeds.items()}) for i in range(40)]
    )
    assert np.abs(logits(sess, {k: v[:40] for k, v in feeds.items()}, batch_size=7) - one_by_one).max() < 1e-4


def test_choose_variant_follows_production_when_it_passes_fidelity():
    """The false block: a clean candidate timed under load picked static while production ran dynamic, and was then slower."""
    timed_under_load = {"static": {"top1_agreement": 1.0, "items_per_s": 92}, "dynamic": {"top1_agreement": 1.0, "items_per_s": 71}}
    assert choose_variant(timed_under_load, 0.99)[0] == "static"
    chosen, why = choose_variant(timed_under_load, 0.99, production_variant="dynamic")
    assert chosen == "dynamic" and "the variant production runs" in why
    unfaithful = {"static": {"top1_agreement": 0.9, "items_per_s": 92}, "dynamic": {"top1_agreement": 1.0, "items_per_s": 71}}
    assert choose_variant(unfaithful, 0.99, production_variant="static")[0] == "dynamic"  # fidelity still comes first
