"""Where every configured resource is bound (definitions.py adds only the gate_graph it derives): every location comes from the
environment, or, where a variable is unset, from the embedded defaults the CLI uses (lib/operations/settings.location_defaults),
so plain `dagster` commands in the repo work too."""

import dagster as dg

from modelcd_assets.lib.operations.settings import location_defaults
from modelcd_assets.resources.alias_lock import AliasLockResource
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets.resources.prometheus import PrometheusResource
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource


@dg.definitions
def resources() -> dg.Definitions:
    defaults = location_defaults()

    def bound(name: str):
        """The variable when it is set (Dagster reads it when a run uses the resource), else its embedded default."""
        return defaults[name] if name in defaults else dg.EnvVar(name)

    return dg.Definitions(
        resources={
            "state": LocalStateResource(home=bound("MODELCD_HOME"), data_dir=bound("MODELCD_DATA")),
            "registry": MlflowRegistryResource(
                tracking_uri=bound("MLFLOW_TRACKING_URI"),
                artifact_location=bound("MODELCD_MLFLOW_ARTIFACTS"),
                signing_key=bound("MODELCD_SIGNING_KEY"),
                verify_key=bound("MODELCD_VERIFY_KEY"),
            ),
            "policy": PolicyResource(policy_dir=bound("MODELCD_POLICY_DIR")),
            "prometheus": PrometheusResource(url=bound("MODELCD_PROMETHEUS_URL")),
            "alias_lock": AliasLockResource(),
        }
    )
