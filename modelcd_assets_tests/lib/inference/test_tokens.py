"""The one tokenizer: tokenizer.json through the tokenizers library, cut and padded by modelcd's rule."""

import numpy as np
import pytest

from modelcd_assets.lib.demo.tickets import generate
from modelcd_assets.lib.errors import BadCandidate
from modelcd_assets.lib.inference.tokens import MAX_LENGTH, TextEncoder, buckets

EDGE_CASES = [
    "",
    " ",
    "\\t\\n",
    "[SEP] [CLS] literal special tokens",
    "Ünïcödé ß 中文 😀 café",
    "MiXeD CaSe REFUND",
    "x " * 300,
    "refund " * 127,
]


def test_the_encoder_matches_transformers_fast_tokenizer(tiny_trained):
    """The server tokenizes without transformers; what it feeds the model must be what the gates fed it."""
    from modelcd_assets.lib.classifier.model_io import load_tokenizer

    texts = [e.text for e in generate(400, 7)] + EDGE_CASES
    hf = load_tokenizer(tiny_trained)(texts, padding="longest", truncation=True, max_length=MAX_LENGTH, return_tensors="np")
    ours = TextEncoder(tiny_trained).encode(texts)
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        assert np.array_equal(ours[name], hf[name]), name


def test_inputs_are_cut_at_max_length_and_padded_to_the_longest(tiny_trained):
    enc = TextEncoder(tiny_trained)
    feeds = enc.encode(["short", "refund " * 400])
    assert feeds["input_ids"].shape == (2, MAX_LENGTH)
    assert feeds["attention_mask"][0].sum() == 3 and (feeds["input_ids"][0, 3:] == enc.pad_id).all()
    assert enc.encode(["short", "a bit longer text"])["input_ids"].shape[1] == 6
    with pytest.raises(ValueError, match="cannot pad to 200"):
        enc.encode(["short"], pad_to=200)


def test_buckets_hold_every_row_once_each_trimmed_to_its_longest(tiny_trained):
    texts = [e.text for e in generate(101, 3)]
    feeds = TextEncoder(tiny_trained).encode(texts)
    out = buckets(feeds, 16)
    rows = np.concatenate([r for r, _ in out])
    assert sorted(rows.tolist()) == list(range(101)) and [len(r) for r, _ in out] == [16] * 6 + [5]
    lengths = feeds["attention_mask"].sum(1)
    for r, batch in out:
        assert batch["input_ids"].shape[1] == lengths[r].max()  # no column of padding only
        assert np.array_equal(batch["input_ids"], feeds["input_ids"][r, : lengths[r].max()])
    assert [int(lengths[r].max()) for r, _ in out] == sorted(int(lengths[r].max()) for r, _ in out)  # sorted by length
    assert np.abs(np.mean([b["input_ids"].shape[1] for _, b in out]) - feeds["input_ids"].shape[1]) > 0  # padding saved


def test_a_model_without_tokenizer_json_is_refused_with_what_to_do(tiny_trained, tmp_path):
    import shutil

    folder = shutil.copytree(tiny_trained, tmp_path / "m")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(BadCandidate, match="no tokenizer.json; save the model's fast tokenizer"):
        TextEncoder(folder)
