"""Loading classifiers and tokenizers from local folders, and merging LoRA adapters into them."""

from __future__ import annotations

import shutil
from pathlib import Path

from modelcd_assets.lib.errors import BadCandidate

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


def quiet_transformers() -> None:
    """Silence loading reports and per-shard progress bars; modelcd reports what matters itself."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def load_classifier(folder: Path, eager_attention: bool = False):
    """A sequence classifier in eval mode; eager attention exports to a graph ORT can fuse."""
    from transformers import AutoModelForSequenceClassification

    quiet_transformers()
    kwargs = {"attn_implementation": "eager"} if eager_attention else {}
    model = AutoModelForSequenceClassification.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False, **kwargs)
    return model.eval()


def load_tokenizer(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)


def copy_tokenizer(src: Path, dst: Path) -> None:
    for name in TOKENIZER_FILES:
        if (Path(src) / name).is_file():
            shutil.copy2(Path(src) / name, Path(dst) / name)


def merge_adapter(base_dir: Path, adapter_dir: Path, out_dir: Path) -> None:
    """Fold a LoRA adapter into its base classifier and save the result as safetensors."""
    import torch
    from peft import PeftModel

    torch.manual_seed(0)  # the head is replaced by the adapter's saved copy; seed what it overwrites
    base = load_classifier(base_dir)
    try:
        model = PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=False)
    except (ValueError, RuntimeError, KeyError) as e:
        raise BadCandidate(f"adapter {adapter_dir} does not fit base {base_dir}: {e}") from e
    merged = model.merge_and_unload()
    tmp = Path(str(out_dir) + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    merged.save_pretrained(str(tmp), safe_serialization=True)
    copy_tokenizer(base_dir, tmp)
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
