"""Fault builders: each takes the production version's fetched files and writes one faulty candidate.

Plain Python on folders (safetensors, JSON, tokenizer files); nothing here registers, gates or loads a candidate.
Weight faults edit the artifact itself (the adapter, or the full model); faults that an adapter cannot carry
(labels, tokenizer, architecture) are written into a full model: what production serves, the adapter merged into its base.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.release.artifact import ADAPTER
from modelcd_assets.lib.release.registry import BUMP_DECLARED

ADAPTER_WEIGHTS, FULL_WEIGHTS = "adapter_model.safetensors", "model.safetensors"
# A base an adapter may have been trained for instead of production's: a hub name, as peft writes it.
OTHER_BASE = "sentence-transformers/all-mpnet-base-v2"
BLOWUP = 1000.0  # the weight-scale blow-up's factor
OUTLIER_BIAS = 1e4  # an always-firing FFN neuron this large leaves INT8 one useful level per activation tensor
SLOW_MIN_INTERMEDIATE = 8192  # the slow model's FFN width: at least 4x, and wide enough to dominate a tiny model's overhead


@dataclass(frozen=True)
class Production:
    """The production version faults are derived from: its fetched files and, for an adapter, its base's."""

    artifact: Path
    kind: str  # adapter or full
    work: Path  # derived folders are cached here
    base: Path | None = None
    base_uri: str | None = None

    @property
    def is_adapter(self) -> bool:
        return self.kind == ADAPTER

    def full_model(self) -> Path:
        """What production serves as one model folder: the adapter merged into its base, or the full model itself."""
        if not self.is_adapter:
            return self.artifact
        merged = self.work / "production-merged"
        if not (merged / "config.json").is_file():
            from modelcd_assets.lib.classifier.model_io import merge_adapter

            merge_adapter(self.base, self.artifact, merged)
        return merged


@dataclass(frozen=True)
class Candidate:
    """A faulty candidate folder and how it reaches the registry."""

    folder: Path
    tags: dict[str, str] = field(default_factory=dict)
    base: str | None = None  # the registered base to register an adapter against, instead of the one it declares
    raw: bool = False  # uploaded straight to MLflow, as another tool could, skipping `modelcd register` and its scan
    marker: Path | None = None  # a file that only code planted in the candidate creates: it must never appear


Builder = Callable[[Production, Path], Candidate]


def _copy(src: Path, out: Path) -> Path:
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out, symlinks=True)
    return out


def weights_file(folder: Path) -> Path:
    return folder / (ADAPTER_WEIGHTS if (folder / "adapter_config.json").is_file() else FULL_WEIGHTS)


def config_file(folder: Path) -> Path:
    return folder / ("adapter_config.json" if (folder / "adapter_config.json").is_file() else "config.json")


def edit_tensors(folder: Path, edit: Callable[[dict], dict | None]) -> Path:
    """Rewrite a folder's safetensors weights through edit (in place, or returning a new dict)."""
    from safetensors.torch import load_file, save_file

    path = weights_file(folder)
    tensors = load_file(str(path))
    tensors = edit(tensors) or tensors
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata={"format": "pt"})
    return folder


def edit_json(path: Path, edit: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2))


def head_keys(tensors: dict) -> list[str]:
    """The classification head's tensors (a full model's, or an adapter's saved copy)."""
    return sorted(k for k in tensors if k.endswith(("classifier.weight", "classifier.bias")))


def _poison_key(tensors: dict) -> str:
    """The tensor a poisoned value reaches on every input: the head's weight, else the first LoRA B."""
    for key in sorted(tensors):
        if key.endswith("classifier.weight"):
            return key
    return next(k for k in sorted(tensors) if "lora_B" in k or tensors[k].dim() == 2)


# Weights and numerics


def identical(prod: Production, out: Path) -> Candidate:
    """Production's files, byte for byte."""
    return Candidate(_copy(prod.artifact, out))


def _poisoned(prod: Production, out: Path, value: float) -> Candidate:
    def poison(w):
        w[_poison_key(w)].view(-1)[0] = value

    return Candidate(edit_tensors(_copy(prod.artifact, out), poison))


def nan_weights(prod: Production, out: Path) -> Candidate:
    """One NaN in a weight every input reaches."""
    return _poisoned(prod, out, float("nan"))


def inf_weights(prod: Production, out: Path) -> Candidate:
    """One +Inf in a weight every input reaches."""
    return _poisoned(prod, out, float("inf"))


def weight_scale_blowup(prod: Production, out: Path) -> Candidate:
    """The head's weights and bias x1000: every argmax is unchanged, every logit and confidence is not."""

    def blow_up(w):
        keys = head_keys(w) or [k for k in w if "lora_B" in k]
        for k in keys:
            w[k] = w[k] * BLOWUP

    return Candidate(edit_tensors(_copy(prod.artifact, out), blow_up))


def random_reinit(prod: Production, out: Path) -> Candidate:
    """Every tensor redrawn at random with its own mean and spread: the scale looks right, the training is gone."""
    import torch

    def redraw(w):
        gen = torch.Generator().manual_seed(0)
        for k, v in w.items():
            if v.dtype.is_floating_point and v.numel() > 1:
                w[k] = (torch.randn(v.shape, generator=gen) * v.float().std() + v.float().mean()).to(v.dtype)

    return Candidate(edit_tensors(_copy(prod.artifact, out), redraw))


def widen_ffn(src: Path, out: Path, extra: int, bias: float) -> Path:
    """A full model whose FFNs gain `extra` neurons with zero input weights, the given bias and zero outgoing weights: same FP32 outputs."""
    import torch

    _copy(src, out)

    def widen(w):
        for k in list(w):
            if k.endswith("intermediate.dense.weight"):
                w[k] = torch.cat([w[k], torch.zeros(extra, w[k].shape[1], dtype=w[k].dtype)], 0)
            elif k.endswith("intermediate.dense.bias"):
                w[k] = torch.cat([w[k], torch.full((extra,), bias, dtype=w[k].dtype)], 0)
            elif k.endswith("output.dense.weight") and "attention" not in k:
                w[k] = torch.cat([w[k], torch.zeros(w[k].shape[0], extra, dtype=w[k].dtype)], 1)

    edit_tensors(out, widen)
    edit_json(out / "config.json", lambda cfg: cfg.__setitem__("intermediate_size", cfg["intermediate_size"] + extra))
    return out


def int8_hostile_outliers(prod: Production, out: Path) -> Candidate:
    """One always-firing FFN neuron at 1e4 per layer, feeding nothing: FP32 is unchanged, INT8 activation ranges are not."""
    return Candidate(widen_ffn(prod.full_model(), out, extra=1, bias=OUTLIER_BIAS))


def slow_model(prod: Production, out: Path) -> Candidate:
    """Every FFN widened with silent neurons: identical outputs at several times the compute."""
    width = json.loads((prod.full_model() / "config.json").read_text())["intermediate_size"]
    return Candidate(widen_ffn(prod.full_model(), out, extra=max(4 * width, SLOW_MIN_INTERMEDIATE) - width, bias=0.0))


# Files


def _rewrite_weights_bytes(prod: Production, out: Path, rewrite: Callable[[bytes], bytes], raw: bool = False) -> Candidate:
    folder = _copy(prod.artifact, out)
    path = weights_file(folder)
    path.write_bytes(rewrite(path.read_bytes()))
    return Candidate(folder, raw=raw)


def truncated_safetensors(prod: Production, out: Path, raw: bool = False) -> Candidate:
    """The weights file cut in half, as an interrupted upload leaves it."""
    return _rewrite_weights_bytes(prod, out, lambda b: b[: len(b) // 2], raw)


def corrupt_header(prod: Production, out: Path) -> Candidate:
    """Bytes inside the safetensors JSON header overwritten."""
    return _rewrite_weights_bytes(prod, out, lambda b: b[:8] + b"\xff\xfe\xfd\xfc" + b[12:])


def trailing_bytes(prod: Production, out: Path) -> Candidate:
    """64 bytes appended after the last tensor."""
    return _rewrite_weights_bytes(prod, out, lambda b: b + b"\0" * 64)


def _with_gap(data: bytes, gap: int = 16) -> bytes:
    """The same tensors, with `gap` unused bytes before the data section's first tensor."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    for name, info in header.items():
        if name != "__metadata__":
            info["data_offsets"] = [o + gap for o in info["data_offsets"]]
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + b"\0" * gap + data[8 + n :]


def offset_gap(prod: Production, out: Path) -> Candidate:
    """Tensor offsets shifted past 16 unused bytes: a data section the tensors no longer tile."""
    return _rewrite_weights_bytes(prod, out, _with_gap)


class _Marker:
    """Unpickling this creates a marker file: proof that the pickle was loaded."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _marker(out: Path) -> Path:
    marker = out.parent / f"{out.name}.code-ran"
    marker.unlink(missing_ok=True)
    return marker


def pickle_renamed(prod: Production, out: Path, raw: bool = False) -> Candidate:
    """A pickle that runs code when loaded, named like an innocuous file (optimizer.msgpack)."""
    folder = _copy(prod.artifact, out)
    marker = _marker(out)
    (folder / "optimizer.msgpack").write_bytes(pickle.dumps(_Marker(str(marker)), protocol=4))
    return Candidate(folder, raw=raw, marker=marker)


def remote_code(prod: Production, out: Path, raw: bool = False) -> Candidate:
    """auto_map in the config and the Python module it names: code that runs with trust_remote_code."""
    folder = _copy(prod.artifact, out)
    marker = _marker(out)
    (folder / "modeling_custom.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    edit_json(
        config_file(folder), lambda cfg: cfg.__setitem__("auto_map", {"AutoModelForSequenceClassification": "modeling_custom.CustomModel"})
    )
    return Candidate(folder, raw=raw, marker=marker)


def symlink_escape(prod: Production, out: Path) -> Candidate:
    """A vocabulary file that is a symlink to a file outside the candidate folder."""
    folder = _copy(prod.artifact, out)
    outside = out.parent / f"{out.name}-outside.txt"
    outside.write_text("a file outside the candidate folder\n")
    os.symlink(outside, folder / "added_vocab.txt")
    return Candidate(folder)


def _onnx_reading(*locations: str, length: int | None = 64) -> bytes:
    """An ONNX model with one initializer (4x4 float32) per location, each external data read from there (the whole file when
    length is None), serialized by hand (onnx.save would act on it)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    inits = []
    for i, location in enumerate(locations):
        w = numpy_helper.from_array(np.ones((4, 4), np.float32), f"w{i}")
        w.data_location = onnx.TensorProto.EXTERNAL
        w.ClearField("raw_data")
        for key, value in (("location", location), ("offset", "0"), *([("length", str(length))] if length is not None else [])):
            entry = w.external_data.add()
            entry.key, entry.value = key, value
        inits.append(w)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["w0"], ["y"])], "g", [], [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 4])], inits
    )
    return helper.make_model(graph).SerializeToString()


def onnx_external_data_escape(prod: Production, out: Path, raw: bool = False) -> Candidate:
    """An ONNX file whose external data is read from ../, outside the candidate folder."""
    folder = _copy(prod.artifact, out)
    outside = out.parent / f"{out.name}-outside.bin"
    outside.write_bytes(b"\0" * 64)
    (folder / "model.onnx").write_bytes(_onnx_reading(f"../{outside.name}"))
    return Candidate(folder, raw=raw)


def onnx_external_data_hiding_code(prod: Production, out: Path, raw: bool = False) -> Candidate:
    """An ONNX file naming as its external data a pickle (weights.data), the config with auto_map and the module it names: code behind
    raw-data names."""
    folder = _copy(prod.artifact, out)
    marker = _marker(out)
    (folder / "weights.data").write_bytes(pickle.dumps(_Marker(str(marker)), protocol=4))
    (folder / "modeling_custom.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    config = config_file(folder)
    edit_json(config, lambda cfg: cfg.__setitem__("auto_map", {"AutoModelForSequenceClassification": "modeling_custom.CustomModel"}))
    (folder / "model.onnx").write_bytes(_onnx_reading("weights.data", config.name, "modeling_custom.py", length=None))
    return Candidate(folder, raw=raw, marker=marker)


def raw(builder: Callable[..., Candidate]) -> Builder:
    """The same fault uploaded straight to MLflow, skipping `modelcd register`: artifact_is_safe must see it."""

    def build(prod: Production, out: Path) -> Candidate:
        return builder(prod, out, raw=True)

    build.__doc__ = f"{builder.__doc__} Uploaded without `modelcd register`."
    return build


def readme_changed(prod: Production, out: Path) -> Candidate:
    """Production's weights with one more line in the README: a distinct content hash, so a build of its own."""
    folder = _copy(prod.artifact, out)
    readme = folder / "README.md"
    readme.write_text((readme.read_text() if readme.is_file() else "") + "\nRe-registered by the fault sandbox.\n")
    return Candidate(folder)


# Structure and contract


def _full_copy(prod: Production, out: Path) -> Path:
    return _copy(prod.full_model(), out)


def _labels(cfg: dict) -> list[str]:
    return [cfg["id2label"][str(i)] for i in range(len(cfg["id2label"]))]


def _set_labels(cfg: dict, names: list[str]) -> None:
    cfg["id2label"] = {str(i): n for i, n in enumerate(names)}
    cfg["label2id"] = {n: i for i, n in enumerate(names)}


def swapped_id2label(prod: Production, out: Path) -> Candidate:
    """The first two labels swapped in the config, weights untouched: every such prediction now reads as the other intent."""
    folder = _full_copy(prod, out)

    def swap(cfg):
        names = _labels(cfg)
        names[0], names[1] = names[1], names[0]
        _set_labels(cfg, names)

    edit_json(folder / "config.json", swap)
    return Candidate(folder)


def contract_change_as_patch(prod: Production, out: Path) -> Candidate:
    """A label renamed (a MAJOR contract change), registered with --bump patch."""
    folder = _full_copy(prod, out)

    def rename(cfg):
        names = _labels(cfg)
        names[0] = f"{names[0]}_v2"
        _set_labels(cfg, names)

    edit_json(folder / "config.json", rename)
    return Candidate(folder, tags={BUMP_DECLARED: "patch"})


def incompatible_tokenizer(prod: Production, out: Path) -> Candidate:
    """A cased tokenizer beside uncased weights: mixed-case text maps to other token ids."""
    folder = _full_copy(prod, out)
    tok = json.loads((folder / "tokenizer.json").read_text())
    if not isinstance(tok.get("normalizer"), dict) or "lowercase" not in tok["normalizer"]:
        raise ModelcdError("incompatible_tokenizer needs a tokenizer.json whose normalizer lowercases (a BERT WordPiece tokenizer)")
    tok["normalizer"]["lowercase"] = False
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    if (folder / "tokenizer_config.json").is_file():
        edit_json(folder / "tokenizer_config.json", lambda cfg: cfg.__setitem__("do_lower_case", False))
    return Candidate(folder)


def vocab_exceeds_embeddings(prod: Production, out: Path) -> Candidate:
    """Tokens added to the tokenizer but not to the embedding table; one of them ("emoji") is in the health probe's text."""
    from modelcd_assets.lib.classifier.model_io import load_tokenizer

    folder = _full_copy(prod, out)
    tok = load_tokenizer(folder)
    tok.add_tokens([f"sku{i}" for i in range(10)] + ["emoji"])
    tok.save_pretrained(str(folder))
    return Candidate(folder)


def dropped_head(prod: Production, out: Path) -> Candidate:
    """The classification head left out of the weights: transformers would silently re-initialize it at random."""
    folder = _full_copy(prod, out)
    return Candidate(edit_tensors(folder, lambda w: {k: v for k, v in w.items() if k not in head_keys(w)}))


def _require_adapter(prod: Production, fault: str) -> None:
    if not prod.is_adapter:
        raise ModelcdError(f"{fault} needs an adapter in production; production is a full model")


def adapter_targets_no_module(prod: Production, out: Path) -> Candidate:
    """An adapter whose config and weights target q_proj/v_proj (another architecture's names): no module of the base matches."""
    _require_adapter(prod, "adapter_targets_no_module")
    folder = _copy(prod.artifact, out)
    edit_tensors(folder, lambda w: {k.replace(".query.", ".q_proj.").replace(".value.", ".v_proj."): v for k, v in w.items()})
    edit_json(folder / "adapter_config.json", lambda cfg: cfg.__setitem__("target_modules", ["q_proj", "v_proj"]))
    return Candidate(folder)


def adapter_weights_match_no_module(prod: Production, out: Path) -> Candidate:
    """An adapter whose config targets the base's modules but whose LoRA weights are saved under names no module has."""
    _require_adapter(prod, "adapter_weights_match_no_module")
    folder = _copy(prod.artifact, out)
    edit_tensors(folder, lambda w: {k.replace(".query.", ".q_proj.").replace(".value.", ".v_proj."): v for k, v in w.items()})
    return Candidate(folder)


def adapter_for_another_base(prod: Production, out: Path) -> Candidate:
    """An adapter that declares another base (same shapes), registered with --base production's base."""
    _require_adapter(prod, "adapter_for_another_base")
    folder = _copy(prod.artifact, out)
    edit_json(folder / "adapter_config.json", lambda cfg: cfg.__setitem__("base_model_name_or_path", OTHER_BASE))
    return Candidate(folder, base=prod.base_uri)


def widen_lora(w: dict) -> None:
    """LoRA A and B (and a classifier head) for a base twice as wide: each weight repeated along the hidden dimension."""
    import torch

    for k, v in w.items():
        if ".lora_A." in k or k.endswith("classifier.weight"):
            w[k] = torch.cat([v, v], 1)
        elif ".lora_B." in k:
            w[k] = torch.cat([v, v], 0)


def adapter_shapes_for_another_base(prod: Production, out: Path) -> Candidate:
    """An adapter trained for a base twice as wide, registered with --base production's base: its LoRA and head shapes do not fit."""
    _require_adapter(prod, "adapter_shapes_for_another_base")
    folder = _copy(prod.artifact, out)
    edit_tensors(folder, widen_lora)
    edit_json(folder / "adapter_config.json", lambda cfg: cfg.__setitem__("base_model_name_or_path", OTHER_BASE))
    return Candidate(folder, base=prod.base_uri)


# Tokenizer and config files an adapter ships beside its weights: every one is compared with the base's copy at register.


def base_files_copied(prod: Production, out: Path, task: str) -> Candidate:
    """Production's adapter with every file of its base that the task compares copied beside it, byte for byte: a clean control."""
    from modelcd_assets.lib.tasks.adapter_files import COMPARED, adapter_files_of

    _require_adapter(prod, "base_files_copied")
    folder = _copy(prod.artifact, out)
    for f in adapter_files_of(task):
        if f.treatment == COMPARED and (prod.base / f.pattern).is_file():
            shutil.copy2(prod.base / f.pattern, folder / f.pattern)
    return Candidate(folder)


def shipped_beside(prod: Production, out: Path, name: str, content: str | dict, fault: str, raw: bool = False) -> Candidate:
    """Production's adapter with one more file (JSON when content is a dict) beside its weights."""
    _require_adapter(prod, fault)
    folder = _copy(prod.artifact, out)
    (folder / name).write_text(json.dumps(content, indent=2) if isinstance(content, dict) else content)
    return Candidate(folder, raw=raw)


def base_json(prod: Production, name: str, fault: str) -> dict:
    """The base's copy of a JSON file, for a fault to edit."""
    if prod.base is None or not (prod.base / name).is_file():
        raise ModelcdError(f"{fault} needs the base's {name}; production's base has none")
    return json.loads((prod.base / name).read_text())


def new_tokens(prod: Production, names: list[str]) -> dict[str, int]:
    """added_tokens.json declaring names with ids past the base's embedding table (its config's vocab_size) and past any it declares."""
    declared = json.loads((prod.base / "added_tokens.json").read_text()) if (prod.base / "added_tokens.json").is_file() else {}
    rows = max([int(base_json(prod, "config.json", "added_tokens_file")["vocab_size"]) - 1, *declared.values()]) + 1
    return {**declared, **{name: rows + i for i, name in enumerate(names)}}


def added_tokens_file(prod: Production, out: Path, raw: bool = False) -> Candidate:
    """added_tokens.json beside the adapter: three tokens with ids past the base's embedding table, which a merged model never reads."""
    return shipped_beside(prod, out, "added_tokens.json", new_tokens(prod, ["sku1", "sku2", "sku3"]), "added_tokens_file", raw)


def special_tokens_map_changed(prod: Production, out: Path) -> Candidate:
    """The base's special_tokens_map.json with another end-of-sequence token ([SEP] replaced by [MASK]), beside the adapter."""
    tokens = base_json(prod, "special_tokens_map.json", "special_tokens_map_changed")
    tokens["sep_token"] = tokens.get("mask_token", "[MASK]")
    return shipped_beside(prod, out, "special_tokens_map.json", tokens, "special_tokens_map_changed")


def tokenizer_config_changed(prod: Production, out: Path) -> Candidate:
    """The base's tokenizer_config.json with do_lower_case flipped, beside the adapter: cased text would map to other ids."""
    cfg = base_json(prod, "tokenizer_config.json", "tokenizer_config_changed")
    cfg["do_lower_case"] = not cfg.get("do_lower_case", True)
    return shipped_beside(prod, out, "tokenizer_config.json", cfg, "tokenizer_config_changed")


def tokenizer_json_changed(prod: Production, out: Path) -> Candidate:
    """The base's tokenizer.json without lowercasing, beside the adapter."""
    tok = base_json(prod, "tokenizer.json", "tokenizer_json_changed")
    if not isinstance(tok.get("normalizer"), dict) or "lowercase" not in tok["normalizer"]:
        raise ModelcdError("tokenizer_json_changed needs a base tokenizer.json whose normalizer lowercases (a BERT WordPiece tokenizer)")
    tok["normalizer"]["lowercase"] = False
    return shipped_beside(prod, out, "tokenizer.json", tok, "tokenizer_json_changed")


def vocab_txt_edited(prod: Production, out: Path) -> Candidate:
    """The base's vocab.txt with two words swapped, beside the adapter: each would read as the other."""
    if prod.base is None or not (prod.base / "vocab.txt").is_file():
        raise ModelcdError("vocab_txt_edited needs the base's vocab.txt (a WordPiece vocabulary); production's base has none")
    words = (prod.base / "vocab.txt").read_text().splitlines()
    i = len(words) // 2
    words[i], words[i + 1] = words[i + 1], words[i]
    return shipped_beside(prod, out, "vocab.txt", "\n".join(words) + "\n", "vocab_txt_edited")


def config_json_changed(prod: Production, out: Path) -> Candidate:
    """The base's config.json with its first two labels swapped, beside the adapter: the merged model takes its base's config."""
    cfg = base_json(prod, "config.json", "config_json_changed")
    names = _labels(cfg)
    names[0], names[1] = names[1], names[0]
    _set_labels(cfg, names)
    return shipped_beside(prod, out, "config.json", cfg, "config_json_changed")
