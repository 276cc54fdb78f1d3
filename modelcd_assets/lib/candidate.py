"""The record of a fetched candidate: what it is, where its files and its build live."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from modelcd_assets.lib.builds import Build, read_json, write_json
from modelcd_assets.lib.registry import CandidateRef

RECORD_FILE = "candidate.json"


@dataclass(frozen=True)
class CandidateRecord:
    name: str
    version: str
    kind: str  # adapter or full
    content_hash: str
    artifact_dir: str
    build_dir: str
    base_uri: str | None = None
    base_hash: str | None = None
    base_dir: str | None = None

    @property
    def ref(self) -> CandidateRef:
        return CandidateRef(self.name, self.version)

    @property
    def build(self) -> Build:
        return Build(Path(self.build_dir))

    def save(self, candidate_dir: Path) -> None:
        write_json(Path(candidate_dir) / RECORD_FILE, asdict(self))

    @classmethod
    def load(cls, candidate_dir: Path) -> "CandidateRecord":
        path = Path(candidate_dir) / RECORD_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no fetched candidate at {candidate_dir}; materialize the candidate asset for this partition first")
        return cls(**read_json(path))


def production_record(registry, candidate_dir_of, name: str) -> CandidateRecord | None:
    """The record of the version the production alias points to; None when nothing is in production."""
    prod = registry.production(name)
    if prod is None:
        return None
    record = CandidateRecord.load(candidate_dir_of(prod))
    if not record.build.chosen_file.is_file():
        raise FileNotFoundError(f"production {prod.uri} has no build in this state folder; run 'modelcd gate {prod.name} {prod.version}' to rebuild it")
    return record
