"""Eight candidates of one model gated at once, each by its own `modelcd gate` process, on SQLite and on PostgreSQL.

Promotion is compare-and-set under the modelcd_promotion pool: every promotion must move the alias from the
production it was judged against, the rest end 'superseded' (exit 3), and the modelcd.previous_production chain
must match the alias history with no version lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from modelcd_assets.launch import PROMOTED, run_gate
from modelcd_assets.lib.operations.settings import apply_local_defaults
from modelcd_assets.lib.release.registry import PREVIOUS_PRODUCTION, PROMOTION, CandidateRef
from modelcd_assets_tests.conftest import make_env

pytestmark = pytest.mark.slow
MODEL = "tiny-concurrent"
CANDIDATES = 8


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def env(request, tmp_path_factory):
    """The state folder; Dagster's storage and MLflow's backend store in SQLite files, or on the session's PostgreSQL server."""
    pg_url = request.getfixturevalue("pg_server").url if request.param == "postgres" else ""
    mp = pytest.MonkeyPatch()
    e = make_env(tmp_path_factory.mktemp(f"concurrent-{request.param}") / "home", mp, pg_url)
    apply_local_defaults(dict(e.env))  # the instance's dagster.yaml, with the promotion pool's limit, before any process starts
    # Eight gated runs share two cores: throughput is not what this test judges.
    e.policy(
        MODEL,
        "accuracy:\n  absolute_floor: 0.6\nquantization:\n  variant: dynamic\n"
        "throughput:\n  min_ratio: 0.01\n  p99_slo_ms: 100000\n  on_inconclusive: pass\n",
    )
    yield e
    mp.undo()


def test_eight_concurrent_gates_promote_by_compare_and_set(env, tiny_trained, tiny_adapters):
    import dagster as dg

    reg = env.registry
    reg.register(tiny_trained, "tiny-base", role="base")
    first = reg.register(tiny_adapters["good"], MODEL)
    instance = dg.DagsterInstance.get()
    assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
    postgres = bool(env.env["MODELCD_PG_URL"])
    assert (type(instance.run_storage).__name__ == "PostgresRunStorage") == postgres
    assert env.env["MLFLOW_TRACKING_URI"].startswith("postgresql") == postgres
    assert run_gate(first, instance=instance).outcome == PROMOTED
    refs = [reg.register(tiny_adapters["good"], MODEL) for _ in range(CANDIDATES)]

    child_env = dict(os.environ, **env.env)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "modelcd_assets.cli", "gate", MODEL, ref.version],
            env=child_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for ref in refs
    ]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    codes = {ref.version: p.returncode for ref, p in zip(refs, procs)}

    assert set(codes.values()) <= {0, 3}, {v: out[-2000:] for (v, c), out in zip(codes.items(), outputs) if c not in (0, 3)}
    promoted = [v for v, c in codes.items() if c == 0]
    superseded = [v for (v, c), out in zip(codes.items(), outputs) if c == 3 and "superseded: production of" in out]
    assert promoted and len(promoted) + len(superseded) == CANDIDATES, (codes, [o[-800:] for o in outputs])

    # Every promotion moved the alias from the production it was judged against...
    for v in promoted:
        tags = reg.tags(CandidateRef(MODEL, v))
        assert json.loads(tags[PROMOTION])["judged_against"] == tags[PREVIOUS_PRODUCTION], (v, tags)
    # ...so the chain from today's production back to the first is exactly the promoted versions: none lost.
    chain, version = [], reg.production(MODEL).version
    while version != first.version:
        chain.append(version)
        version = reg.tags(CandidateRef(MODEL, version))[PREVIOUS_PRODUCTION]
    assert sorted(chain, key=int) == sorted(promoted, key=int)
    for v in superseded:
        assert PROMOTION not in reg.tags(CandidateRef(MODEL, v))
