"""A real server process under load from a second process, swapping adapters at least 20 times.

Every response must succeed and be served entirely by the version its header names: each row's
logits are checked against that version's gated INT8 artifact run here on the same request.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import CONTENT, CandidateRef
from modelcd_assets.lib.splits import read_split
from modelcd_assets.serving.classifier.engine import Engine
from modelcd_assets_tests.serving.conftest import MODEL, ServerProcess, gated_state

pytestmark = pytest.mark.slow
REQUESTS, CONCURRENCY, MIN_SWAPS = 12000, 4, 20  # enough load to last 20 swaps on the INT8 server
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_trained, tiny_adapters):
    mp = pytest.MonkeyPatch()
    yield from gated_state(tmp_path_factory.mktemp("serving-live"), mp, tiny_trained, tiny_adapters)
    mp.undo()


def expected_logits(served, ref, batches: list[list[str]]) -> list[np.ndarray]:
    record = CandidateRecord.of(served.env.home, CandidateRef(MODEL, ref.version))
    engine = Engine(record.chosen_int8(), record.build.merged, threads=1)
    return [engine.logits(b) for b in batches]


def test_swaps_under_load_fail_nothing_and_never_mix(served, tmp_path):
    texts = [ex.text for ex in read_split(served.env.data / "traffic_current.jsonl")]
    batches = [texts[i : i + 1 + i % 4] for i in range(0, 200, 5)]  # 40 requests of 1 to 4 texts
    by_hash = {served.env.registry.tags(ref)[CONTENT]: expected_logits(served, ref, batches) for ref in (served.v1, served.v2)}
    a, b = by_hash.values()
    # The two adapters must differ far more than the tolerance, or a mix could pass unnoticed.
    assert min(float(np.max(np.abs(x - y))) for x, y in zip(a, b)) > 50 * TOLERANCE

    server = ServerProcess(served.env, tmp_path / "server.log")
    try:
        server.wait_ready(served.v2.version)
        (tmp_path / "batches.json").write_text(json.dumps(batches))
        load = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "modelcd_assets.serving.loadgen",
                "--url",
                server.url,
                "--batches",
                str(tmp_path / "batches.json"),
                "--requests",
                str(REQUESTS),
                "--concurrency",
                str(CONCURRENCY),
                "--out",
                str(tmp_path / "load.json"),
            ]
        )
        swaps, refused_checked, under_load = 0, False, 0
        time.sleep(1.0)  # let the load reach steady state before the first swap
        while load.poll() is None:
            target = served.v1 if swaps % 2 == 0 else served.v2
            r = server.admin("POST", "/v1/admin/adapters", json={"version": target.version})
            assert r.status_code == 200, r.text
            swaps += 1
            under_load += load.poll() is None
            if swaps == MIN_SWAPS // 2 and not refused_checked:
                before = server.admin("GET", "/v1/admin/adapters").json()["default"]
                bad = server.admin("POST", "/v1/admin/adapters", json={"version": served.ungated.version})
                assert bad.status_code == 409 and "no valid verdict" in bad.json()["error"] and bad.json()["serving"] == before
                assert server.admin("GET", "/v1/admin/adapters").json()["default"] == before
                refused_checked = True
        assert load.wait() == 0
    finally:
        server.stop()

    results = json.loads((tmp_path / "load.json").read_text())["results"]
    assert len(results) == REQUESTS
    failed = [r for r in results if r["status"] != 200]
    assert not failed, failed[:3]

    def distance(r, sha):
        return float(np.max(np.abs(np.array(r["logits"]) - by_hash[sha][r["batch"]])))

    mixed = [(r["i"], {sha[:8]: distance(r, sha) for sha in by_hash}) for r in results if distance(r, r["sha"]) > TOLERANCE]
    assert mixed == [], f"{len(mixed)} responses match neither adapter's own logits (request, distance to each): {mixed[:5]}"
    served_by = {r["sha"] for r in results}
    assert served_by == set(by_hash), "both adapters must have served traffic"
    assert refused_checked and under_load >= MIN_SWAPS, f"only {under_load} swaps happened while the load ran"
