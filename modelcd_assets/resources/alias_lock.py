"""The production alias's lock as a resource: which lock every move of an alias holds, chosen by where Dagster keeps its runs."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from modelcd_assets.lib.layout import StateLayout
from modelcd_assets.lib.release.alias_lock import DEFAULT_TIMEOUT_S, AliasLock, FileAliasLock, PostgresAliasLock


def postgres_url_of(instance: dg.DagsterInstance) -> str:
    """The URL of the PostgreSQL database the instance keeps its runs in, or "" when its storage is elsewhere (SQLite)."""
    storage = instance.run_storage
    return getattr(storage, "postgres_url", "") if type(storage).__module__.startswith("dagster_postgres") else ""


def alias_lock_for(instance: dg.DagsterInstance, state_root: Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> AliasLock:
    """pg_advisory_xact_lock on the instance's PostgreSQL database when its runs are there (every run pod of the Kubernetes
    deployment shares it), else an flock under the state folder (every writer on one machine shares it)."""
    url = postgres_url_of(instance)
    return PostgresAliasLock(url, timeout_s) if url else FileAliasLock(StateLayout(state_root).locks(), timeout_s)


class AliasLockResource(dg.ConfigurableResource):
    """The lock promotion and rollback hold around the production alias's compare-and-set (lib/release/alias_lock.py)."""

    timeout_s: float = Field(
        DEFAULT_TIMEOUT_S,
        gt=0,
        description="Seconds a move waits for the alias's lock; past them its step fails with that reason and nothing moves",
    )

    def lock(self, instance: dg.DagsterInstance, state_root: Path) -> AliasLock:
        return alias_lock_for(instance, state_root, self.timeout_s)
