"""The I/O contract of a model version and Model SemVer: what a change to it requires of the version number."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import onnx

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.inference.tokens import tokenizer_hash, truncation_length
from modelcd_assets.lib.model.config import labels_of
from modelcd_assets.lib.model.model_io import load_tokenizer

LEVELS = ("patch", "minor", "major")


def _value_info(v) -> dict:
    t = v.type.tensor_type
    dims = [d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "?") for d in t.shape.dim]
    return {"name": v.name, "dtype": onnx.TensorProto.DataType.Name(t.elem_type), "shape": dims}


def extract_contract(onnx_path: Path, model_dir: Path) -> dict:
    """Inputs, outputs, labels, tokenizer identity, max length and opset of one exported model."""
    model = onnx.load(str(onnx_path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return {
        "inputs": [_value_info(v) | {"optional": v.name in initializers} for v in model.graph.input],
        "outputs": [_value_info(v) for v in model.graph.output],
        "id2label": labels_of(model_dir),
        "tokenizer_sha256": tokenizer_hash(model_dir),
        "vocab_size": len(load_tokenizer(model_dir)),
        "max_length": int(cfg.get("max_position_embeddings", 0)),
        "truncation_length": truncation_length(model_dir),
        "opset": next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0),
    }


@dataclass(frozen=True)
class Change:
    level: str  # patch, minor or major
    what: str


def diff_contracts(old: dict, new: dict, token_ids_changed: bool) -> list[Change]:
    """Every difference between two contracts with the bump it requires (none: weights only, a patch)."""
    if new.get("task") == "causal-lm" or old.get("task") == "causal-lm":
        from modelcd_assets.lib.causal_lm.contract import diff_lm_contracts

        if old.get("task") != new.get("task"):
            return [Change("major", f"the task changed: {old.get('task', 'classification')} -> {new.get('task', 'classification')}")]
        return diff_lm_contracts(old, new)
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


def required_level(changes: list[Change]) -> str:
    return max((c.level for c in changes), key=LEVELS.index, default="patch")


def parse_semver(text: str) -> tuple[int, int, int]:
    parts = str(text).split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ModelcdError(f"{text!r} is not a semantic version; expected MAJOR.MINOR.PATCH, e.g. 1.4.0")
    return int(parts[0]), int(parts[1]), int(parts[2])


def bump(version: str, level: str) -> str:
    major, minor, patch = parse_semver(version)
    return {"major": f"{major + 1}.0.0", "minor": f"{major}.{minor + 1}.0", "patch": f"{major}.{minor}.{patch + 1}"}[level]


def level_between(old: str, new: str) -> str | None:
    """The bump from old to new, or None when new is not greater."""
    a, b = parse_semver(old), parse_semver(new)
    if b <= a:
        return None
    return "major" if b[0] > a[0] else "minor" if b[1] > a[1] else "patch"


def changes_to_dicts(changes: list[Change]) -> list[dict]:
    return [asdict(c) for c in changes]
