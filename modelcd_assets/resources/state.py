"""Where modelcd keeps local state: candidate reports, content-addressed builds, data."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from modelcd_assets.lib.layout import CandidateFiles, StateLayout
from modelcd_assets.lib.release.calibration import CalibrationStore
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.splits import split_path


class LocalStateResource(dg.ConfigurableResource):
    """A state folder on local disk (the embedded default; a shared volume on Kubernetes)."""

    home: str = Field(description="Root of modelcd's state folder, e.g. .modelcd")
    data_dir: str = Field(description="Folder with the evaluation, calibration and traffic splits (JSON lines)")

    @property
    def root(self) -> Path:
        return Path(self.home).resolve()

    @property
    def layout(self) -> StateLayout:
        return StateLayout(self.root)

    def files(self, ref: CandidateRef) -> CandidateFiles:
        """Per-version reports and the fetched artifact."""
        return self.layout.candidate(ref)

    def variant_decision(self, name: str, key: str) -> Path:
        """A registered model's INT8 variant choice for one base and calibration set (key), shared by its versions."""
        return self.layout.variant_decision(name, key)

    def record(self, ref: CandidateRef) -> CandidateRecord:
        """The candidate's record: its files, build, production baseline and effective policy."""
        return CandidateRecord.of(self.root, ref)

    def cache_dir(self, kind: str) -> Path:
        """Content-addressed work shared by every candidate: bases, builds, tokenized inputs."""
        return self.layout.cache(kind)

    def calibration_sets(self) -> CalibrationStore:
        """Every calibration set a version was or may be calibrated with, under its sha256."""
        return CalibrationStore(self.layout.calibration())

    def default_calibration(self) -> str:
        """The data folder's calibration split, frozen under its hash: the set of every model that has none of its own."""
        return self.calibration_sets().save(self.split("calibration"))

    def split(self, name: str) -> Path:
        path = split_path(Path(self.data_dir).resolve(), name)
        if not path.is_file():
            raise FileNotFoundError(
                f"data split {name!r} not found at {path}; run 'modelcd demo' or put a JSON-lines file with text and label there"
            )
        return path
