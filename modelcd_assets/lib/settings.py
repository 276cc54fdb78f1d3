"""Embedded defaults: every piece of local state under one folder, overridable by environment."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def local_defaults(home: Path) -> dict[str, str]:
    """Environment for SQLite-backed Dagster and MLflow under home."""
    home = Path(home).resolve()
    return {
        "MODELCD_HOME": str(home),
        "MODELCD_DATA": str(home / "data"),
        "MODELCD_POLICY_DIR": str(home / "policies"),
        "MODELCD_MLFLOW_ARTIFACTS": str(home / "mlartifacts"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{home / 'mlflow.db'}",
        "DAGSTER_HOME": str(home / "dagster"),
        "MODELCD_PROMETHEUS_URL": "http://127.0.0.1:9090",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def apply_local_defaults(environ: dict | None = None) -> dict[str, str]:
    """Fill unset variables with the defaults under MODELCD_HOME (default ./.modelcd) and prepare the folders."""
    env = os.environ if environ is None else environ
    defaults = local_defaults(Path(env.get("MODELCD_HOME", ".modelcd")))
    for key, value in defaults.items():
        env.setdefault(key, value)
    for key in ("MODELCD_DATA", "MODELCD_POLICY_DIR", "MODELCD_MLFLOW_ARTIFACTS", "DAGSTER_HOME"):
        Path(env[key]).mkdir(parents=True, exist_ok=True)
    instance_yaml = Path(env["DAGSTER_HOME"]) / "dagster.yaml"
    template = Path(__file__).resolve().parents[2] / "dagster.yaml"
    # The embedded default follows the repository's template, so a changed template (a new pool limit) takes effect;
    # an instance file the user wrote themselves (not starting with the template's first line) is left alone.
    if template.is_file() and (not instance_yaml.exists() or _ours_and_outdated(instance_yaml, template)):
        shutil.copy2(template, instance_yaml)
    return {k: env[k] for k in defaults}


def _ours_and_outdated(instance_yaml: Path, template: Path) -> bool:
    ours, theirs = template.read_text(), instance_yaml.read_text()
    return theirs != ours and theirs.splitlines()[:1] == ours.splitlines()[:1]
