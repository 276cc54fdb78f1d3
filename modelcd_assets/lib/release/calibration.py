"""Calibration sets for static INT8: read, validated against the evaluation split, and stored by content hash.

A calibration set feeds the activation ranges that static INT8 freezes into the model. A new set is refused,
with every reason, when it is not JSON lines with a non-empty "text" per line, holds fewer texts than the
policy asks for, is far shorter or longer than what the model is judged on (median token length against the
evaluation split), or shares a text with the evaluation split (the gates would then judge on calibration data).
What the file does not show by itself (whether its ranges serve the model well) is for the gates to measure.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.hashing import file_sha256
from modelcd_assets.lib.judging.policy import CalibrationPolicy


class BadCalibrationSet(ModelcdError):
    """A calibration file that may not be used; the current set stays."""


@dataclass(frozen=True)
class CalibrationSummary:
    """What was measured about an accepted set."""

    examples: int
    median_tokens: float
    evaluation_median_tokens: float

    @property
    def length_ratio(self) -> float:
        return self.median_tokens / self.evaluation_median_tokens


def read_texts(path: Path) -> list[str]:
    """The texts of a JSON-lines calibration file: one object per line with a non-empty string "text" (a "label" is allowed, not needed)."""
    path = Path(path)
    if not path.is_file():
        raise BadCalibrationSet(f'calibration file {path} does not exist; pass a JSON-lines file with one {{"text": ...}} object per line')
    texts, problems = [], []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                problems.append(f"line {i} is not JSON ({e.msg})")
                continue
            text = row.get("text") if isinstance(row, dict) else None
            if not isinstance(text, str) or not text.strip():
                problems.append(f'line {i} has no non-empty string "text"')
                continue
            texts.append(text)
    if problems:
        more = f" (and {len(problems) - 3} more lines)" if len(problems) > 3 else ""
        raise BadCalibrationSet(
            f'calibration file {path} is not JSON lines of {{"text": ...}} objects: {"; ".join(problems[:3])}{more}; fix those lines'
        )
    return texts


def inline_texts(texts: Sequence, source: str = "the inline calibration set") -> list[str]:
    """Texts handed over inline (the calibrate job's config.texts): each a non-empty string, as a file's lines must be."""
    problems = [f"texts[{i}] is not a non-empty string" for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise BadCalibrationSet(f"{source} was refused and the current set stays: {'; '.join(problems[:3])}{more}")
    return list(texts)


def jsonl(texts: Sequence[str]) -> bytes:
    """The calibration file of texts: one {"text": ...} object per line, as read_texts reads it."""
    return "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()


def _normalized(text: str) -> str:
    return " ".join(text.lower().split())


def validate(
    texts: Sequence[str],
    evaluation_texts: Sequence[str],
    token_lengths: Callable[[Sequence[str]], np.ndarray],
    policy: CalibrationPolicy,
    source: str = "the calibration set",
) -> CalibrationSummary:
    """Raise BadCalibrationSet with every problem found, or return what was measured.

    token_lengths: the model's own tokenizer (lib/inference/tokens.TextEncoder.lengths), so lengths are what calibration feeds.
    """
    problems = []
    if len(texts) < policy.min_examples:
        problems.append(f"it holds {len(texts)} texts, fewer than calibration.min_examples ({policy.min_examples})")
    if len(texts) > policy.max_examples:
        problems.append(f"it holds {len(texts)} texts, more than calibration.max_examples ({policy.max_examples})")
        texts = texts[: policy.max_examples]  # the rest is measured on what may be used
    long = [i for i, t in enumerate(texts) if len(t) > policy.max_text_chars]
    if long:
        problems.append(
            f"{len(long)} of its texts are longer than calibration.max_text_chars ({policy.max_text_chars}; first: text {long[0]}, "
            f"{len(texts[long[0]])} characters)"
        )
    median = float(np.median(token_lengths(list(texts)))) if texts else 0.0
    reference = float(np.median(token_lengths(list(evaluation_texts))))
    ratio = policy.max_median_length_ratio
    if texts and not reference / ratio <= median <= reference * ratio:
        problems.append(
            f"its median length is {median:g} tokens against the evaluation split's {reference:g}; "
            f"calibration.max_median_length_ratio allows {reference / ratio:.1f} to {reference * ratio:.1f}"
        )
    evaluation = {_normalized(t) for t in evaluation_texts}
    shared = [t for t in texts if _normalized(t) in evaluation]
    if shared:
        problems.append(
            f"{len(shared)} of its texts are in the evaluation split (first: {shared[0][:60]!r}); the gates would judge "
            "the model on its own calibration data, so remove them"
        )
    if problems:
        raise BadCalibrationSet(f"{source} was refused and the current set stays: " + "; ".join(problems))
    return CalibrationSummary(len(texts), median, reference)


class CalibrationStore:
    """Calibration files under their sha256, so a version records exactly which set calibrated it."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, sha256: str) -> Path:
        return self.root / f"{sha256}.jsonl"

    def save(self, src: Path) -> str:
        """Freeze a copy of src under its hash (atomically, once); returns the hash."""
        return self._freeze(file_sha256(src), lambda tmp: shutil.copy2(src, tmp))

    def save_texts(self, texts: Sequence[str]) -> str:
        """Freeze texts handed over inline as the JSON-lines file a set is (jsonl()), under its hash; returns the hash. The
        same texts in a file written the same way have the same hash."""
        data = jsonl(texts)
        return self._freeze(hashlib.sha256(data).hexdigest(), lambda tmp: tmp.write_bytes(data))

    def _freeze(self, digest: str, write) -> str:
        dst = self.path(digest)
        if not dst.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_suffix(".tmp")
            write(tmp)
            tmp.rename(dst)
        return digest

    def require(self, sha256: str) -> Path:
        """The frozen file of a recorded set; raises with what to do when this state folder does not have it."""
        path = self.path(sha256)
        if not path.is_file():
            raise ModelcdError(
                f"calibration set {sha256[:12]} is recorded in the registry but not in {self.root}; register it again "
                "with 'modelcd calibrate NAME --from FILE' from the same file"
            )
        if file_sha256(path) != sha256:
            raise ModelcdError(
                f"{path} no longer matches its hash {sha256[:12]}; delete it and register the set again with 'modelcd calibrate'"
            )
        return path
