"""Shared by the gate benchmarks: a private copy of the demo's production artifact."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from modelcd_assets.lib.operations.settings import apply_local_defaults
from modelcd_assets.lib.release.registry import CandidateRef, Registry


@contextlib.contextmanager
def production_copy(name: str) -> Iterator[tuple[Registry, CandidateRef, Path] | None]:
    """The local registry, the version `production` points to and its fetched files; None (with a hint printed) before `make demo`."""
    apply_local_defaults()
    reg = Registry.from_env()
    prod = reg.production(name)
    if prod is None:
        print(f"no production version of {name}; run 'make demo' first")
        yield None
        return
    with tempfile.TemporaryDirectory() as tmp:
        yield reg, prod, reg.fetch(prod, Path(tmp) / "production")
