"""Follows a registered model's production alias: when it moves to a version with a valid verdict, the server swaps within one poll.

The alias is a registry tag anyone with write access to the registry can move; the pool loads a version only with a
valid attestation over its bytes (lib/release/servable.py), so an alias moved by hand to a blocked version changes nothing
that is served: the old version keeps serving, the refusal is logged and counted (modelcd_alias_refused).
"""

from __future__ import annotations

import asyncio
import logging

from modelcd_assets.lib.release.registry import Registry

log = logging.getLogger("modelcd.serve")


class AliasFollower:
    """Polls the registry; a version that failed to load is not retried until the alias moves again."""

    def __init__(self, registry: Registry, model: str, swapper, on_refused=None):
        self.registry, self.model, self.swapper = registry, model, swapper
        self.on_refused = on_refused  # called with (version, why) when the alias points at a version that may not be served
        self.followed: str | None = None
        self.seen: str | None = None  # where the alias pointed at the last poll
        self.refused: dict[str, str] = {}  # version -> why its load was refused

    def waiting_reason(self) -> str:
        if self.refused:
            version, why = next(reversed(self.refused.items()))
            return f"version {version} was refused: {why}"
        return f"no production version of {self.model} has been loaded yet"

    async def poll_once(self) -> str | None:
        """Swap to the alias's version if it moved; returns the version now followed."""
        loop = asyncio.get_running_loop()
        try:
            prod = await loop.run_in_executor(None, self.registry.production, self.model)
        except Exception as e:  # the registry being down must not take serving down with it
            log.warning("cannot read the production alias of %s: %s", self.model, e)
            return self.followed
        try:  # versions production was rolled back from are answered from no more, by the `adapter` field either
            await loop.run_in_executor(None, self.swapper.pool.refresh_withdrawn)
        except Exception as e:
            log.warning("cannot read which versions of %s were rolled back: %s", self.model, e)
        moved = prod is not None and prod.version != self.seen
        self.seen = prod.version if prod is not None else None
        if not moved or prod.version == self.followed:
            return self.followed
        try:
            report = await self.swapper.swap_async(prod.version)
        except Exception as e:  # refused (ModelcdError) or broken; either way the old version keeps serving
            self.refused[prod.version] = str(e)
            log.error("production moved to %s but the server keeps serving %s: %s", prod.uri, self.followed or "nothing", e)
            if self.on_refused is not None:
                self.on_refused(prod.version, str(e))
            return self.followed
        self.followed = prod.version
        log.info("followed production of %s to version %s in %.3f s", self.model, prod.version, report.seconds)
        return self.followed
