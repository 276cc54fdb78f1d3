"""The gate policy resource: one YAML file per registered model."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from modelcd_assets.lib.judging.policy import Policy, policy_file, policy_for


class PolicyResource(dg.ConfigurableResource):
    """Reads <policy_dir>/<model name>.yaml; a model without a file gets the defaults."""

    policy_dir: str = Field(description="Folder of per-model policy files named <registered model>.yaml")

    def path_for(self, model_name: str) -> Path | None:
        return policy_file(Path(self.policy_dir), model_name)

    def for_model(self, model_name: str) -> Policy:
        return policy_for(Path(self.policy_dir), model_name)
