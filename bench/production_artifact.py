"""Shared by the gate benchmarks: the demo's registry and its production version."""

from __future__ import annotations

import os

from modelcd_assets.lib.registry import CandidateRef, Registry
from modelcd_assets.lib.settings import apply_local_defaults


def registry_and_production(name: str) -> tuple[Registry, CandidateRef] | None:
    """The local registry and the version `production` points to; None (with a hint printed) before `make demo`."""
    apply_local_defaults()
    reg = Registry(os.environ["MLFLOW_TRACKING_URI"], os.environ["MODELCD_MLFLOW_ARTIFACTS"])
    prod = reg.production(name)
    if prod is None:
        print(f"no production version of {name}; run 'make demo' first")
        return None
    return reg, prod
