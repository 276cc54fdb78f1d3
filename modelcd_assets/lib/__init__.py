"""Framework-free core of modelcd: nothing in here imports Dagster."""
