"""The model registry resource."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from modelcd_assets.lib.registry import Registry


class MlflowRegistryResource(dg.ConfigurableResource):
    """An MLflow tracking server or database holding the model registry."""

    tracking_uri: str = Field(description="MLflow tracking and registry URI, e.g. sqlite:///.modelcd/mlflow.db or http://mlflow:5000")
    artifact_location: str = Field(description="Where registration runs store artifacts (a local folder for the embedded default)")
    page_size: int = Field(100, ge=1, le=1000, description="Results per registry search call; every listing reads all pages")

    def registry(self) -> Registry:
        return Registry(self.tracking_uri, self.artifact_location, self.page_size)
