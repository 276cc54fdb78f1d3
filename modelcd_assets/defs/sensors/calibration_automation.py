"""calibration_automation: evaluates calibration_revision's automation condition, running from the daemon's start.

Dagster's default automation sensor starts stopped (it is toggled on in the UI); this one is declared running, so a new
calibration set becomes a gated revision under `modelcd up` without a click.
"""

import dagster as dg

calibration_automation = dg.AutomationConditionSensorDefinition(
    "calibration_automation",
    target=dg.AssetSelection.assets("calibration_revision"),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description=(
        "Re-quantizes production as a calibration revision whenever a model's calibration set changes (calibration_revision is eager)."
    ),
)
