"""The demo data is reproducible and large enough for the gates to judge."""

from collections import Counter

from modelcd_assets.lib.demo.tickets import LABELS, SPLITS, generate, write_splits
from modelcd_assets.lib.splits import read_split


def test_same_seed_same_data():
    assert generate(50, 7) == generate(50, 7)
    assert generate(50, 7) != generate(50, 8)


def test_splits_sizes_and_label_noise(tmp_path):
    paths = write_splits(tmp_path)
    evaluation = read_split(paths["evaluation"])
    assert len(evaluation) >= 2000
    assert set(SPLITS) == {"train", "evaluation", "calibration", "traffic_current", "traffic_shifted"}
    counts = Counter(e.label for e in evaluation)
    assert set(counts) == set(LABELS) and min(counts.values()) > 400
    shifted = read_split(paths["traffic_shifted"])
    assert Counter(e.label for e in shifted).most_common(1)[0][0] == "technical"
    assert sum(len(e.text) for e in shifted) / len(shifted) > 1.5 * sum(len(e.text) for e in evaluation) / len(evaluation)
