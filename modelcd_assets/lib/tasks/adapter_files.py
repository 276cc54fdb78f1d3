"""What an adapter folder may hold, per task, and what happens to each file: used (and so judged), compared with the
base's copy, kept as documentation, or refused with what to do. Anything not listed is refused. Torch-free: the registry
asks at register, and artifact_is_safe asks again at the gate (for a folder uploaded without `modelcd register`).

Why a file the base also has is compared, never used: every adapter of a base is served with the base's tokenizer,
template and config. A classifier's adapter is merged into its base, and the merged folder gets the base's tokenizer
files and config (lib/classifier/model_io.merge_adapter); a causal LM's adapter runs on the base build, which serves the
base's tokenizer, chat template, EOS and generation config. An adapter's own copy of one of them is never what serves, so
it passes only when it says what the base's says (the same bytes; JSON with the same values; text with the same lines),
and any other copy is refused: served, it would be ignored, and its tokens, template or EOS would never take effect.
A tokenizer or config of its own is registered as a model of its own, whose contract the SemVer gate judges.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from modelcd_assets.lib.errors import BadCandidate
from modelcd_assets.lib.judging.safety import Finding
from modelcd_assets.lib.tasks.names import declaration_of

USED = "used"
COMPARED = "compared with the base's copy"
DOCUMENTATION = "kept as documentation"
REFUSED = "refused"
ALLOWED = "allowed by the policy's safety.allow"  # what a file the policy allows is, when the task does not list it


@dataclass(frozen=True)
class AdapterFile:
    """One kind of file an adapter folder may hold: a name or glob on its path in the folder, and what happens to it."""

    pattern: str
    treatment: str  # USED, COMPARED, DOCUMENTATION or REFUSED
    note: str  # used: what reads and judges it; compared: what to do when it differs; refused: what to do instead

    def matches(self, path: str) -> bool:
        return fnmatchcase(path, self.pattern)


TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
)
_DOCS = (
    AdapterFile("README.md", DOCUMENTATION, "free text (peft writes a model card); nothing that serves or judges reads it"),
    AdapterFile("LICENSE*", DOCUMENTATION, "free text; nothing that serves or judges reads it"),
)
_CLASSIFIER_SERVES_ITS_BASE = (
    "the adapter is merged into its base and served with the base's tokenizer and config, so this copy would be "
    "ignored: remove it from the adapter folder, or register the merged model as a full model with it "
    "(--tokenizer-change for another tokenizer), whose contract change the SemVer gate judges"
)
_LM_SERVES_ITS_BASE = (
    "every adapter of a base is served with the base build's tokenizer, chat template, EOS and generation config, so "
    "this copy would be ignored: remove it from the adapter folder to be served with the base's, or register a base of "
    "its own with it ('modelcd register PATH --name NAME-base --task causal-lm') and train the adapter on that"
)

CLASSIFIER_ADAPTER_FILES = (
    AdapterFile(
        "adapter_config.json", USED, "peft merges the adapter into its base by it; adapter_fits_base and model_loads_cleanly judge it"
    ),
    AdapterFile(
        "adapter_model.safetensors",
        USED,
        "the LoRA weights (and any saved head) merged into the base; every gate judges the merged model",
    ),
    *(AdapterFile(name, COMPARED, _CLASSIFIER_SERVES_ITS_BASE) for name in (*TOKENIZER_FILES, "config.json")),
    *(
        AdapterFile(name, REFUSED, "a classifier generates no text, so nothing would read it: remove it from the adapter folder")
        for name in ("generation_config.json", "chat_template.jinja")
    ),
    *_DOCS,
)
LM_ADAPTER_FILES = (
    AdapterFile(
        "adapter_config.json",
        USED,
        "its rank, alpha and targets lay the weights out in the base build's LoRA slots; adapter_fits_base judges it",
    ),
    AdapterFile("adapter_model.safetensors", USED, "the LoRA weights, served as an adapter file on the base build; every gate judges them"),
    *(
        AdapterFile(name, COMPARED, _LM_SERVES_ITS_BASE)
        for name in (*TOKENIZER_FILES, "chat_template.jinja", "generation_config.json", "config.json")
    ),
    AdapterFile(
        "*.onnx_adapter",
        REFUSED,
        "modelcd makes the adapter file from adapter_model.safetensors itself and would not read "
        "this one: remove it from the adapter folder",
    ),
    *_DOCS,
)


def adapter_files_of(task: str) -> tuple[AdapterFile, ...]:
    """The files an adapter of task may hold (the task's `adapter_files`)."""
    return declaration_of(task).adapter_files


def entry_for(path: str, files: tuple[AdapterFile, ...]) -> AdapterFile | None:
    return next((f for f in files if f.matches(path)), None)


def _keys(value: dict, limit: int = 4) -> str:
    keys = sorted(map(str, value))
    return ", ".join(keys[:limit]) + (f" (+{len(keys) - limit} more)" if len(keys) > limit else "")


def difference(own: Path, base: Path | None) -> str | None:
    """How an adapter's copy of a file differs from its base's, in words; None when they say the same."""
    if base is None or not base.is_file():
        try:
            declared = json.loads(own.read_bytes())
        except (ValueError, RecursionError):
            declared = None
        what = f", and this one declares {_keys(declared)}" if isinstance(declared, dict) and declared else ""
        return f"the base has no {own.name}{what}"
    mine, theirs = own.read_bytes(), base.read_bytes()
    if mine == theirs:
        return None
    if own.name.endswith(".json"):
        try:
            a, b = json.loads(mine), json.loads(theirs)
        except (ValueError, RecursionError):
            return "not comparable with the base's copy (not JSON)"
        if a == b:
            return None
        if isinstance(a, dict) and isinstance(b, dict):
            return f"differs from the base's copy in {_keys({k for k in a.keys() | b.keys() if a.get(k, ...) != b.get(k, ...)})}"
        return "differs from the base's copy"
    try:
        a, b = mine.decode().splitlines(), theirs.decode().splitlines()
    except UnicodeDecodeError:
        return "differs from the base's copy (other bytes)"
    if a == b:
        return None
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    changed = sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
    return f"differs from the base's copy in {changed} of {max(len(a), len(b))} lines, first at line {first + 1}"


def adapter_file_findings(folder: Path, task: str, base_dir: Path | None, allow: tuple[str, ...] = ()) -> list[Finding]:
    """Every file of an adapter folder its task refuses: not listed (and not in allow), refused, or unlike the base's copy.

    base_dir: the base's files; None when the adapter ships no compared file (adapter_files_to_compare says which)."""
    files = adapter_files_of(task)
    findings = []
    root = Path(folder)
    for p in sorted(q for q in root.rglob("*") if not q.is_dir()):
        path = p.relative_to(root).as_posix()
        entry = entry_for(path, files)
        if entry is None:
            if not any(fnmatchcase(path, pattern) for pattern in allow):
                listed = ", ".join(f.pattern for f in files if f.treatment != REFUSED)
                findings.append(Finding(path, f"not a file a {task} adapter folder holds ({listed}); nothing would read it: remove it"))
        elif entry.treatment == REFUSED:
            findings.append(Finding(path, entry.note))
        elif entry.treatment == COMPARED:
            if why := difference(p, Path(base_dir) / path if base_dir is not None else None):
                findings.append(Finding(path, f"{why}; {entry.note}"))
    return findings


def adapter_files_to_compare(folder: Path, task: str) -> list[str]:
    """The files of an adapter folder that are compared with the base's copy."""
    files, root = adapter_files_of(task), Path(folder)
    return sorted(p.name for p in root.iterdir() if p.is_file() and (e := entry_for(p.name, files)) is not None and e.treatment == COMPARED)


def refuse_unlisted_files(folder: Path, task: str, fetch_base: Callable[[Path], Path], allow: tuple[str, ...] = ()) -> None:
    """Raise BadCandidate naming every file of an adapter folder that its task refuses, with what to do for each.

    fetch_base(dst) puts the base's verified files in dst; it is called only when the folder ships a file to compare."""
    with tempfile.TemporaryDirectory(prefix="modelcd-base-") as tmp:
        base = fetch_base(Path(tmp) / "base") if adapter_files_to_compare(folder, task) else None
        findings = adapter_file_findings(folder, task, base, allow)
    if findings:
        raise BadCandidate(
            f"refusing to register {folder}: {len(findings)} file(s) a {task} adapter folder may not hold as they are: "
            + "; ".join(map(str, findings))
        )
