"""What answers POST /v1/classify: the request read within its limits, resolved to one version, batched with other
requests for that version, and accounted; and the chaos endpoint's faults."""

from __future__ import annotations

import asyncio
import logging
import random
import time
import weakref
from concurrent.futures import Executor

import numpy as np
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from modelcd_assets.lib.operations.traffic_log import TrafficLog
from modelcd_assets.serving import ARM_HEADER, served_headers
from modelcd_assets.serving.accounting import RequestAccount
from modelcd_assets.serving.classifier import inference_protocol as oip
from modelcd_assets.serving.classifier.batcher import MicroBatcher
from modelcd_assets.serving.classifier.classify_api import FaultRequest, read_classify
from modelcd_assets.serving.classifier.engine import Served
from modelcd_assets.serving.classifier.pool import ClassifierPool
from modelcd_assets.serving.metrics import ServerMetrics
from modelcd_assets.serving.rejections import UNKNOWN_VERSION, Rejected, not_served, read_body
from modelcd_assets.serving.rollout import RolloutFollower, caller_of
from modelcd_assets.serving.sampler import Sampler
from modelcd_assets.serving.shadow import ShadowLane
from modelcd_assets.serving.versions import UnknownVersion

log = logging.getLogger("modelcd.serve")


class ClassifyAccount(RequestAccount):
    """A classify request's account: its texts, and its latency from the moment it was admitted to a version."""

    metrics: ServerMetrics

    def classified(self, texts: int) -> None:
        self.metrics.texts.labels(*self.labels).inc(texts)

    def finish(self, failed: bool) -> None:
        super().finish(failed)
        self.metrics.latency.labels(*self.labels).observe(time.perf_counter() - self.admitted_at)


class ClassifyHandler:
    """Classification for one pool. Calls run `workers` at a time on the inference executor, in micro-batches that never
    mix versions; a share serving.sample_ratio of the requests answered 200 have their texts sampled to the traffic log."""

    def __init__(
        self,
        pool: ClassifierPool,
        metrics: ServerMetrics,
        traffic: TrafficLog,
        sampler: Sampler,
        inference: Executor,
        workers: int,
        rollout: RolloutFollower,
        shadow: ShadowLane,
    ):
        self.pool, self.metrics, self.traffic, self.sampler = pool, metrics, traffic, sampler
        self.rollout, self.shadow = rollout, shadow
        self.inference, self.workers = inference, workers
        self.faults: dict[str, FaultRequest] = {}
        # One batcher per loaded version, gone with it: a batch never mixes versions.
        self._batchers: weakref.WeakKeyDictionary[Served, MicroBatcher] = weakref.WeakKeyDictionary()

    def batcher(self, served: Served) -> MicroBatcher:
        b = self._batchers.get(served)
        if b is None:
            policy = self.pool.policy
            b = self._batchers[served] = MicroBatcher(served.logits, self.inference, policy.max_batch, policy.max_wait_ms, self.workers)
        return b

    def resolve(self, version: str | None) -> Served:
        """The one snapshot this request is served by, or Rejected (404, or 503 before any version is served)."""
        try:
            return self.pool.resolve(version)
        except UnknownVersion:
            raise not_served(self.pool.model, version, ready=self.pool.active is not None) from None

    async def classify(self, request: Request) -> JSONResponse:
        account = ClassifyAccount(self.metrics, self.pool.model)
        try:
            body = await read_classify(request, self.pool.policy)
            served = self.resolve(body.adapter)
        except Rejected as r:
            return account.reject(r).response()
        status, payload, headers = await self.answer(request, served, body.texts, body.adapter, account)
        return JSONResponse(payload, status_code=status, headers=headers)

    async def answer(
        self, request: Request, served: Served, texts: list[str], version: str | None, account: ClassifyAccount
    ) -> tuple[int, dict, dict]:
        """Texts classified by served, for either API: (status, the classify API's payload, headers). A request that names
        no version is production's, or, at a canary step, the candidate's for a canaried caller; one production answered
        may be shadowed by the candidate, and sampled to the traffic log."""
        split = self.rollout.split if version is None else None
        candidate = self.rollout.candidate() if split is not None else None
        canary = candidate is not None and split.canaried(caller_of(request))
        if canary:
            served = candidate
        account.admit(served)
        status, payload = await self._answer(served, texts, account)
        if status == 200 and self.traffic.chosen():
            self.sampler.submit(served.version, texts)
        account.finish(failed=status >= 500)
        if status == 200 and candidate is not None and not canary and split.shadowed():
            self.shadow.offer(lambda: self._shadow(candidate, served, texts, payload))
        return status, payload, {**served_headers(served), **({ARM_HEADER: "canary"} if canary else {})}

    # The Open Inference Protocol (KServe V2): the same versions, verdicts, limits, accounts and rollout as /v1/classify.

    def _named(self, name: str, version: str | None) -> Served:
        """The version a V2 route names, or Rejected (404; 503 before production is served)."""
        if name != self.pool.model:
            raise Rejected(404, UNKNOWN_VERSION, f"model {name!r} is not served here; this server serves {self.pool.model!r}")
        return self.resolve(version)

    def model_metadata(self, name: str, version: str | None) -> JSONResponse:
        try:
            served = self._named(name, version)
        except Rejected as r:
            return _v2_error(r)
        versions = [v.version for v in self.pool.loaded() if v.version not in self.pool.withdrawn]
        return JSONResponse(oip.model_metadata(self.pool.model, versions if version is None else [served.version], served.engine.labels))

    def model_ready(self, name: str, version: str | None) -> JSONResponse:
        try:
            self._named(name, version)
        except Rejected as r:
            return _v2_error(r)
        return JSONResponse({"name": name, "ready": True})

    async def infer(self, request: Request, name: str, version: str | None) -> Response:
        account = ClassifyAccount(self.metrics, self.pool.model)
        try:
            raw = await read_body(request, self.pool.policy.max_body_bytes)
            inference = oip.read_inference(raw, request.headers.get(oip.HEADER_LENGTH), self.pool.policy)
            served = self._named(name, version)
        except Rejected as r:
            return _v2_error(account.reject(r))
        status, payload, headers = await self.answer(request, served, inference.texts, version, account)
        if status != 200:
            return JSONResponse({"error": payload["error"]}, status_code=status, headers=headers)
        logits = np.asarray([p["logits"] for p in payload["predictions"]], np.float32)
        body, kinds = oip.infer_response(
            self.pool.model, payload["version"], inference, logits, [p["label"] for p in payload["predictions"]]
        )
        return Response(body, status_code=200, headers={**headers, **kinds})

    async def _shadow(self, candidate: Served, production: Served, texts: list[str], answered: dict) -> dict:
        """A copy of a request production answered, answered by the candidate, counted in its series, and compared per text:
        the label, and the shift of the top-class probability."""
        account = ClassifyAccount(self.metrics, self.pool.model)
        account.admit(candidate)
        status, payload = await self._answer(candidate, texts, account)
        account.finish(failed=status >= 500)
        record = {"ts": time.time(), "production": production.version, "candidate": candidate.version, "texts": texts}
        if status != 200:
            return {**record, "candidate_error": payload.get("error")}
        theirs, ours = answered["predictions"], payload["predictions"]
        agreed = sum(p["label"] == c["label"] for p, c in zip(theirs, ours, strict=True))
        shifts = [_top_probability(c["logits"]) - _top_probability(p["logits"]) for p, c in zip(theirs, ours, strict=True)]
        labels = account.labels
        self.metrics.shadow_pairs.labels(*labels).inc(len(texts))
        self.metrics.shadow_agreements.labels(*labels).inc(agreed)
        for shift in shifts:
            self.metrics.confidence_shift.labels(*labels).observe(shift)
        return {
            **record,
            "production_labels": [p["label"] for p in theirs],
            "candidate_labels": [c["label"] for c in ours],
            "confidence_shift": shifts,
        }

    async def _answer(self, served: Served, texts: list[str], account: ClassifyAccount) -> tuple[int, dict]:
        try:
            fault = self.faults.get(served.version)
            if fault is not None and fault.latency_ms:
                await asyncio.sleep(fault.latency_ms / 1000)
            if fault is not None and random.random() < fault.error_ratio:
                return 500, {"error": "injected fault (chaos testing through /v1/admin/faults)"}
            out = await self.batcher(served).submit(texts)
            if fault is not None and random.random() < fault.nan_ratio:
                out = np.full_like(out, np.nan)
            bad = int((~np.isfinite(out)).any(axis=1).sum())
            if bad:
                account.non_finite()
                return 500, {"error": f"the model produced non-finite outputs for {bad} of {len(texts)} texts"}
            names = served.engine.labels
            payload = {
                "model": served.model,
                "version": served.version,
                "adapter_sha256": served.content_hash,
                "artifact_sha256": served.artifact_sha256,
                "labels": names,
                "predictions": [{"label": names[int(row.argmax())], "logits": [float(x) for x in row]} for row in out],
            }
            account.classified(len(texts))
            return 200, payload
        except Exception as e:  # a failed request is counted and answered, never dropped
            log.exception("classify failed on %s version %s", served.model, served.version)
            return 500, {"error": f"classification failed: {e}"}

    def inject(self, body: FaultRequest) -> dict:
        """Chaos testing: set (or, all zero, clear) a version's fault."""
        if body.latency_ms or body.error_ratio or body.nan_ratio:
            self.faults[body.version] = body
        else:
            self.faults.pop(body.version, None)
        return {"faults": {v: f.model_dump() for v, f in self.faults.items()}}


def _top_probability(logits: list[float]) -> float:
    z = np.asarray(logits, np.float64)
    e = np.exp(z - z.max())
    return float(e.max() / e.sum())


def _v2_error(r: Rejected) -> JSONResponse:
    """The Open Inference Protocol's error body, {"error": message}; a request the classify API answers 422 is a 400 here."""
    return JSONResponse({"error": str(r)}, status_code=400 if r.status == 422 else r.status, headers=r.headers)
