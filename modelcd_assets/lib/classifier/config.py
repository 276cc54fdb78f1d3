"""What a model folder's config.json declares, read without torch or transformers (the server reads it too)."""

from __future__ import annotations

import json
from pathlib import Path

from modelcd_assets.lib.errors import BadCandidate


def labels_of(folder: Path) -> list[str]:
    """id2label of a model folder, in id order."""
    cfg = json.loads((Path(folder) / "config.json").read_text())
    id2label = cfg.get("id2label") or {}
    if not id2label:
        raise BadCandidate(f"{folder}/config.json has no id2label; a classifier must name its labels")
    return [id2label[str(i)] for i in range(len(id2label))]
