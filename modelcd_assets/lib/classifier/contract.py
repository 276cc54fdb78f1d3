"""The I/O contract of a classifier version: its ONNX inputs and outputs, labels, tokenizer, lengths and opset, and what a change
of each requires of the version number (Model SemVer: lib/judging/contract.py)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx

from modelcd_assets.lib.classifier.config import labels_of
from modelcd_assets.lib.classifier.model_io import load_tokenizer
from modelcd_assets.lib.inference.tokens import tokenizer_hash, truncation_length
from modelcd_assets.lib.judging.contract import Change, value_info


def extract_contract(onnx_path: Path, model_dir: Path, task: str) -> dict:
    """Inputs, outputs, labels, tokenizer identity, max length and opset of one exported encoder model, with the task whose
    contract it is (a classifier's; another task may export an encoder with a head of its own the same way)."""
    model = onnx.load(str(onnx_path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return {
        "task": task,
        "inputs": [value_info(v) | {"optional": v.name in initializers} for v in model.graph.input],
        "outputs": [value_info(v) for v in model.graph.output],
        "id2label": labels_of(model_dir),
        "tokenizer_sha256": tokenizer_hash(model_dir),
        "vocab_size": len(load_tokenizer(model_dir)),
        "max_length": int(cfg.get("max_position_embeddings", 0)),
        "truncation_length": truncation_length(model_dir),
        "opset": next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0),
    }


def diff_classifier_contracts(old: dict, new: dict, token_ids_changed: bool) -> list[Change]:
    """Every difference between two classifier contracts with the bump it requires (none: weights only, a patch)."""
    changes: list[Change] = []
    for side in ("inputs", "outputs"):
        before = {v["name"]: v for v in old[side]}
        after = {v["name"]: v for v in new[side]}
        for name in before.keys() - after.keys():
            changes.append(Change("major", f"{side[:-1]} {name!r} removed"))
        for name in after.keys() - before.keys():
            optional = side == "inputs" and after[name].get("optional")
            changes.append(
                Change("minor" if optional else "major", f"{side[:-1]} {name!r} added" + (" (optional)" if optional else " (required)"))
            )
        for name in before.keys() & after.keys():
            b, a = before[name], after[name]
            if b["dtype"] != a["dtype"]:
                changes.append(Change("major", f"{side[:-1]} {name!r} retyped {b['dtype']} -> {a['dtype']}"))
            if b["shape"] != a["shape"]:
                changes.append(Change("major", f"{side[:-1]} {name!r} reshaped {b['shape']} -> {a['shape']}"))
    old_labels, new_labels = old["id2label"], new["id2label"]
    if new_labels[: len(old_labels)] != old_labels:
        changes.append(Change("major", f"labels changed order or names: {old_labels} -> {new_labels}"))
    elif len(new_labels) > len(old_labels):
        changes.append(Change("minor", f"labels added at the end: {new_labels[len(old_labels) :]}"))
    if old["tokenizer_sha256"] != new["tokenizer_sha256"]:
        changes.append(
            Change(
                "major" if token_ids_changed else "patch",
                "tokenizer changed" + (" and maps text to different ids" if token_ids_changed else " (same ids on probes)"),
            )
        )
    if new["max_length"] > old["max_length"]:
        changes.append(Change("minor", f"max length increased {old['max_length']} -> {new['max_length']}"))
    elif new["max_length"] < old["max_length"]:
        changes.append(Change("major", f"max length decreased {old['max_length']} -> {new['max_length']}"))
    if "truncation_length" in old and new["truncation_length"] != old["truncation_length"]:
        longer = new["truncation_length"] > old["truncation_length"]
        changes.append(
            Change("minor" if longer else "major", f"inputs cut at {old['truncation_length']} -> {new['truncation_length']} tokens")
        )
    if new["opset"] != old["opset"]:
        changes.append(Change("minor" if new["opset"] > old["opset"] else "major", f"ONNX opset {old['opset']} -> {new['opset']}"))
    return changes
