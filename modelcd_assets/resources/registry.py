"""The model registry resource."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from modelcd_assets.lib.release.registry import Registry
from modelcd_assets.lib.release.signing import Keys


class MlflowRegistryResource(dg.ConfigurableResource):
    """An MLflow tracking server or database holding the model registry."""

    tracking_uri: str = Field(description="MLflow tracking and registry URI, e.g. sqlite:///.modelcd/mlflow.db or http://mlflow:5000")
    artifact_location: str = Field(description="Where registration runs store artifacts (a local folder for the embedded default)")
    page_size: int = Field(100, ge=1, le=1000, description="Results per registry search call; every listing reads all pages")
    signing_key: str = Field(
        "", description="Private key (PEM) that signs registrations and verdicts; only runs that register or promote need it"
    )
    verify_key: str = Field("", description="Public key (PEM) every fetch, load and verdict is verified with")

    def registry(self) -> Registry:
        default = Keys.from_env()
        keys = Keys(
            Path(self.signing_key) if self.signing_key else default.private, Path(self.verify_key) if self.verify_key else default.public
        )
        return Registry(self.tracking_uri, self.artifact_location, self.page_size, keys=keys)
