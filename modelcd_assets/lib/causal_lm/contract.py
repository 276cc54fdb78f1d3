"""The I/O contract of a causal-LM version: what its clients depend on besides the weights.

The vocabulary and special tokens, the BOS, EOS and pad ids, the chat template, the context length and the rule for
prompts beyond it, the generation config, and the adapter slots every version of the base fills. Read from what serves:
the base build, and the base's generation config. An adapter's own copy of one of these files is refused at register unless
it says what the base's says (lib/tasks/adapter_files.py), so it is never read here: a copy that only differs in bytes (the
builder rewrites tokenizer_config.json) would otherwise show as a tokenizer change. Changing any of them changes what a
client's prompt means or when generation stops: a MAJOR change, except a longer context or another generation default
(MINOR)."""

from __future__ import annotations

import json
from pathlib import Path

from modelcd_assets.lib.causal_lm.build import MODEL_FILE
from modelcd_assets.lib.causal_lm.decoder import GENAI_CONFIG, chat_template
from modelcd_assets.lib.causal_lm.slots import AdapterSlots
from modelcd_assets.lib.hashing import file_sha256, text_hash
from modelcd_assets.lib.judging.contract import Change, value_info
from modelcd_assets.lib.tasks.names import CAUSAL_LM

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")
GENERATION_FILE = "generation_config.json"
# Prompts whose tokens and max_new_tokens together exceed the context are refused, by the gates and the server alike.
LONG_PROMPTS = "refused"


def lm_contract(build_dir: Path, base_dir: Path, slots: AdapterSlots) -> dict:
    """The contract of an adapter on its base build (build_dir: the INT8 decoder folder)."""
    import onnx
    from tokenizers import Tokenizer

    genai = json.loads((Path(build_dir) / GENAI_CONFIG).read_text())["model"]
    tokenizer_file = Path(build_dir) / "tokenizer.json"
    tok = Tokenizer.from_file(str(tokenizer_file))
    special = sorted(t["content"] for t in json.loads(tokenizer_file.read_text()).get("added_tokens", []) if t.get("special"))
    generation_file = Path(base_dir) / GENERATION_FILE
    generation = json.loads(generation_file.read_text()) if generation_file.is_file() else {}
    generation.pop("transformers_version", None)
    graph = onnx.load(str(Path(build_dir) / MODEL_FILE), load_external_data=False)
    eos = genai["eos_token_id"]
    return {
        "task": CAUSAL_LM,
        "inputs": [value_info(v) for v in graph.graph.input if v.name not in slots.shapes],
        "outputs": [value_info(v) for v in graph.graph.output],
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "embedding_rows": int(genai["vocab_size"]),
        "special_tokens": special,
        "bos_id": genai.get("bos_token_id"),
        "eos_ids": sorted(eos) if isinstance(eos, list) else [int(eos)],
        "pad_id": genai.get("pad_token_id"),
        "tokenizer_sha256": text_hash(*(f"{n}:{file_sha256(p)}" for n in TOKENIZER_FILES if (p := Path(build_dir) / n).is_file())),
        "chat_template_sha256": text_hash(chat_template(build_dir)),
        "context_length": int(genai["context_length"]),
        "long_prompts": LONG_PROMPTS,
        "generation": generation,
        "adapter_slots": {"rank": slots.rank, "targets": list(slots.targets)},
    }


def diff_lm_contracts(old: dict, new: dict, token_ids_changed: bool) -> list[Change]:
    """Every difference between two causal-LM contracts with the bump it requires. Any change of the tokenizer's files is
    MAJOR here, whether or not the probes showed other ids (token_ids_changed): a causal LM's prompt format and stop tokens
    live in those files too."""
    changes: list[Change] = []
    for side in ("inputs", "outputs"):
        before, after = {v["name"]: v for v in old[side]}, {v["name"]: v for v in new[side]}
        for name in sorted(before.keys() ^ after.keys()):
            changes.append(Change("major", f"{side[:-1]} {name!r} {'removed' if name in before else 'added'}"))
        for name in sorted(before.keys() & after.keys()):
            if before[name] != after[name]:
                changes.append(
                    Change(
                        "major",
                        f"{side[:-1]} {name!r} changed {before[name]['dtype']}{before[name]['shape']} ->"
                        f" {after[name]['dtype']}{after[name]['shape']}",
                    )
                )
    major = {
        "vocab_size": "vocabulary size",
        "special_tokens": "special tokens",
        "bos_id": "BOS id",
        "eos_ids": "EOS ids",
        "pad_id": "pad id",
        "tokenizer_sha256": "tokenizer",
        "chat_template_sha256": "chat template",
        "long_prompts": "rule for prompts beyond the context",
        "adapter_slots": "adapter slots (rank, targets)",
        "embedding_rows": "embedding rows",
    }
    for key, what in major.items():
        if old.get(key) != new.get(key):
            shown = "" if key.endswith("sha256") else f": {old.get(key)} -> {new.get(key)}"
            changes.append(
                Change(
                    "major",
                    f"{what} changed{shown}"
                    + (" (and maps text to different ids)" if key == "tokenizer_sha256" and token_ids_changed else ""),
                )
            )
    if new["context_length"] != old["context_length"]:
        longer = new["context_length"] > old["context_length"]
        changes.append(
            Change(
                "minor" if longer else "major",
                f"context {'increased' if longer else 'decreased'} {old['context_length']} -> {new['context_length']} tokens",
            )
        )
    if new.get("generation") != old.get("generation"):
        keys = sorted(
            k
            for k in set(old.get("generation", {})) | set(new.get("generation", {}))
            if old.get("generation", {}).get(k) != new.get("generation", {}).get(k)
        )
        changes.append(Change("minor", f"generation config changed: {', '.join(keys)}"))
    return changes
