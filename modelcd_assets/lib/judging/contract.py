"""Model SemVer, for every task: a change of a version's I/O contract (what each task's contract module says it is), the bump it
requires, and what a version number declares. What a contract holds and how two differ are the task's (lib/tasks/names
TaskDeclaration.contract; lib/tasks/semver.contract_changes dispatches)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from modelcd_assets.lib.errors import ModelcdError

LEVELS = ("patch", "minor", "major")


def value_info(v) -> dict:
    """An ONNX graph input or output as a contract names it: its name, element type and shape."""
    import onnx

    t = v.type.tensor_type
    dims = [d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "?") for d in t.shape.dim]
    return {"name": v.name, "dtype": onnx.TensorProto.DataType.Name(t.elem_type), "shape": dims}


@dataclass(frozen=True)
class Change:
    level: str  # patch, minor or major
    what: str


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
