"""The only place resources are bound; every location comes from the environment."""

import dagster as dg

from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets.resources.prometheus import PrometheusResource
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(
        resources={
            "state": LocalStateResource(home=dg.EnvVar("MODELCD_HOME"), data_dir=dg.EnvVar("MODELCD_DATA")),
            "registry": MlflowRegistryResource(tracking_uri=dg.EnvVar("MLFLOW_TRACKING_URI"), artifact_location=dg.EnvVar("MODELCD_MLFLOW_ARTIFACTS"),
                                               signing_key=dg.EnvVar("MODELCD_SIGNING_KEY"), verify_key=dg.EnvVar("MODELCD_VERIFY_KEY")),
            "policy": PolicyResource(policy_dir=dg.EnvVar("MODELCD_POLICY_DIR")),
            "prometheus": PrometheusResource(url=dg.EnvVar("MODELCD_PROMETHEUS_URL")),
        }
    )
