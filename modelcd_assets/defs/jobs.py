"""The gated delivery job that the registry sensor and `modelcd gate` both launch."""

import dagster as dg

from modelcd_assets.defs.partitions import candidates

GATE_JOB = "gate_candidate"

# In process by default: the multiprocess executor starts a subprocess per step (about 23), each importing torch and the
# definitions, and on 2 cores a run's wall time was 2.8x the sum of its steps against 1.01x in process
# (bench/bench_run_overhead.py). A run config may still choose `execution: {config: {multiprocess: {}}}`.
gate_candidate = dg.define_asset_job(
    GATE_JOB,
    selection=dg.AssetSelection.groups("candidate", "build", "evaluation", "release"),
    partitions_def=candidates,
    config={"execution": {"config": {"in_process": {}}}},
    description="Fetch, build, quantize, evaluate and benchmark one candidate; promote it only if every gate passes.",
)

CALIBRATION_JOB = "calibrate"

calibrate = dg.define_asset_job(
    CALIBRATION_JOB,
    selection=dg.AssetSelection.assets("calibration_set", "calibration_revision"),
    description=(
        "Register a model's new calibration set (config: model, source), refused unless valid, and re-quantize production "
        "under it as a calibration revision for the registry sensor to gate. Without config: version the data folder's split."
    ),
)

ROLLBACK_JOB = "rollback_production"

rollback_production = dg.define_asset_job(
    ROLLBACK_JOB,
    selection=dg.AssetSelection.assets("production_rollback"),
    description="Move production back to the most recent earlier version that passed its gates, recording why.",
)

GATE_REPORT_JOB = "write_gate_report"

write_gate_report = dg.define_asset_job(
    GATE_REPORT_JOB,
    selection=dg.AssetSelection.assets("gate_report"),
    partitions_def=candidates,
    description="Write a candidate's gate decision on one page, after its gated run, whatever the gates decided.",
)

ROLLOUT_JOB = "advance_rollout"

advance_rollout = dg.define_asset_job(
    ROLLOUT_JOB,
    selection=dg.AssetSelection.assets("rollout", "production_model"),
    partitions_def=candidates,
    config={"execution": {"config": {"in_process": {}}}},
    description=(
        "Move a candidate's rollout one step (advance, pause, resume, abort, supersede), as rollout_sensor or `modelcd rollout` "
        "decided; at its promote step production_model moves the alias in the same run."
    ),
)
