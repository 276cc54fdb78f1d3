"""Labelled examples as JSON lines: the splits (evaluation, calibration, traffic) that the gates, calibration and drift read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


def split_path(data_dir: Path, name: str) -> Path:
    """Where a data folder keeps the split called name (evaluation, calibration, train, traffic_current, ...)."""
    return Path(data_dir) / f"{name}.jsonl"


@dataclass(frozen=True)
class Example:
    text: str
    label: str


def read_split(path: Path) -> list[Example]:
    """Read a JSON-lines split (the demo's, lib/demo/tickets.write_splits, or a user's: same schema)."""
    out = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                out.append(Example(str(row["text"]), str(row["label"])))
            except (json.JSONDecodeError, KeyError) as e:
                raise ValueError(f"{path}:{i}: expected a JSON object with 'text' and 'label' ({e})") from e
    if not out:
        raise ValueError(f"{path} holds no examples")
    return out
