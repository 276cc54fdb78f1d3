"""What both public apps stand on, for one pool: metrics with every rejection reason at zero, the traffic log and its
sampler, the swapper, the alias and rollout followers and the shadow lane, a lifespan that runs the followers and closes
the rest, the admin app, and the probes (/healthz, /readyz, /metrics)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from modelcd_assets.lib.operations.traffic_log import TrafficLog, record_bytes_bound
from modelcd_assets.serving.admin import Swapper, admin_app, loader_executor
from modelcd_assets.serving.follower import AliasFollower
from modelcd_assets.serving.metrics import Metrics
from modelcd_assets.serving.rollout import RolloutFollower
from modelcd_assets.serving.sampler import Sampler
from modelcd_assets.serving.shadow import ShadowLane
from modelcd_assets.serving.versions import VersionPool


@dataclass
class BaseApp:
    pool: VersionPool
    metrics: Metrics
    traffic: TrafficLog
    sampler: Sampler
    swapper: Swapper
    follower: AliasFollower
    rollout: RolloutFollower
    shadow: ShadowLane
    app: FastAPI
    admin: FastAPI
    require_admin: object


def base_app(
    pool: VersionPool,
    metrics: Metrics,
    reasons: tuple[str, ...],
    *,
    admin_token: str | None,
    poll_seconds: float,
    description: str,
    closers: tuple[Callable[[], None], ...] = (),
) -> BaseApp:
    for reason in reasons:
        metrics.rejected.labels(pool.model, reason)  # zeros from the start
    policy = pool.policy
    traffic = TrafficLog(
        pool.state_root,
        pool.model,
        policy.sample_ratio,
        policy.sample_max,
        max_bytes=policy.sample_max_bytes,
        max_record_bytes=record_bytes_bound(policy.max_text_chars),
    )
    sampler = Sampler(traffic, metrics.samples_dropped.labels(pool.model))
    swapper = Swapper(pool, metrics, loader_executor())
    follower = AliasFollower(
        pool.registry, pool.model, swapper, on_refused=lambda version, why: metrics.alias_refused.labels(pool.model, version).set(1)
    )

    rollout = RolloutFollower(pool.registry, pool.model, swapper, metrics)
    shadow = ShadowLane(pool.state_root, pool.model, metrics, policy.max_shadow_in_flight)

    async def follow() -> None:
        """The alias first, then the rollout, which is judged against the production the alias gave."""
        while True:
            await follower.poll_once()
            try:
                await rollout.poll_once()
            except Exception:  # said, and production alone answers until the next poll
                rollout.failed()
            await asyncio.sleep(poll_seconds)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        task = asyncio.create_task(follow())
        try:
            yield
        finally:
            task.cancel()
            shadow.close()
            for close in closers:
                close()
            sampler.close()
            swapper.executor.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="modelcd serve", description=description, lifespan=lifespan)
    admin, require_admin = admin_app(pool, swapper, admin_token)
    for a in (app, admin):
        a.state.pool, a.state.follower, a.state.metrics, a.state.traffic = pool, follower, metrics, traffic
        a.state.rollout, a.state.shadow = rollout, shadow
    app.state.admin_app = admin

    @app.get("/healthz")
    async def healthz():
        return {"status": "live"}

    @app.get("/readyz")
    async def readyz():
        served = pool.active
        if served is None:
            return JSONResponse({"status": "not ready", "reason": follower.waiting_reason()}, status_code=503)
        return {
            "status": "ready",
            "model": served.model,
            "version": served.version,
            "adapter_sha256": served.content_hash,
            "artifact_sha256": served.artifact_sha256,
            "variant": served.variant,
            **({"adapter_file_sha256": served.adapter_sha256} if hasattr(served, "adapter_sha256") else {}),
        }

    @app.get("/metrics")
    async def metrics_endpoint():
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return BaseApp(pool, metrics, traffic, sampler, swapper, follower, rollout, shadow, app, admin, require_admin)
