"""modelcd's own lock around the production alias's compare-and-set, on SQLite (flock) and on PostgreSQL (advisory lock).

The race test runs promotion's compare-and-set in several processes at once, with no Dagster pool around it (as when the
pool's slot claim fails) and a failpoint that sleeps between the compare and the set: under the lock exactly one moves the
alias and the others end superseded; without it the same harness sees several get past the compare.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from modelcd_assets.lib.layout import StateLayout
from modelcd_assets.lib.operations.failpoints import ENV as FAILPOINT
from modelcd_assets.lib.release.alias_lock import AliasLockUnavailable, FileAliasLock, PostgresAliasLock, lock_key
from modelcd_assets.lib.release.registry import PREVIOUS_PRODUCTION, PROMOTION, CandidateRef
from modelcd_assets_tests.conftest import TEST_LOCK, make_env

MOVERS = 4
SLEEP_S = 2.0  # between the compare and the set: every mover's compare falls inside the others' window
PROCESS_TIMEOUT_S = 600


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request, tmp_path, monkeypatch):
    """A state folder (registry on SQLite, or on the session's PostgreSQL server) and the lock its writers share."""
    pg_url = request.getfixturevalue("pg_server").url if request.param == "postgres" else ""
    env = make_env(tmp_path / "home", monkeypatch, pg_url)
    lock = f"postgres:{pg_url}" if pg_url else f"file:{StateLayout(tmp_path / 'home').locks()}"
    return env, lock


def race(env, tiny_base: Path, tmp_path: Path, lock: str) -> tuple[CandidateRef, list[CandidateRef], dict[str, tuple[int, str]]]:
    """MOVERS processes each move the alias from the same production to their own candidate at once; exit code and stderr by version."""
    reg, name = env.registry, f"race-{uuid.uuid4().hex[:8]}"  # a PostgreSQL registry is shared by every state folder on it
    production = reg.register(tiny_base, name)
    reg.move_production(production, {"test": "the production every mover compares with"}, expected=None, lock=TEST_LOCK)
    candidates = [reg.register(tiny_base, name) for _ in range(MOVERS)]
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    environ = dict(os.environ, **env.env, **{FAILPOINT: f"between_compare_and_set:sleep={SLEEP_S}"})
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "modelcd_assets_tests.lib.release.alias_mover",
                lock,
                name,
                c.version,
                production.version,
                str(barrier),
                str(MOVERS),
            ],
            env=environ,
            stderr=subprocess.PIPE,
            text=True,
        )
        for c in candidates
    ]
    ended = {c.version: (p.wait(timeout=PROCESS_TIMEOUT_S), p.stderr.read()) for c, p in zip(candidates, procs)}
    return production, candidates, ended


def test_the_alias_lock_lets_exactly_one_of_concurrent_moves_through(backend, tiny_base, tmp_path):
    env, lock = backend
    production, candidates, ended = race(env, tiny_base, tmp_path, lock)
    reg = env.registry
    moved = [v for v, (code, _) in ended.items() if code == 0]
    assert len(moved) == 1, ended
    assert all(
        code == 3 and "superseded: production of" in err and f"to {moved[0]}" in err for v, (code, err) in ended.items() if v != moved[0]
    ), ended
    winner = CandidateRef(production.name, moved[0])
    assert reg.production(production.name) == winner
    assert reg.tags(winner)[PREVIOUS_PRODUCTION] == production.version
    assert [c.version for c in candidates if PROMOTION in reg.tags(c)] == moved


def test_without_the_lock_the_same_race_lets_several_moves_past_the_compare(modelcd_env, tiny_base, tmp_path):
    """The harness can fail: with no lock, more than one mover compares before any sets, which is the race the lock closes."""
    _, _, ended = race(modelcd_env, tiny_base, tmp_path, "none")
    past_the_compare = [v for v, (code, _) in ended.items() if code != 3]
    assert len(past_the_compare) > 1, ended


def test_a_file_lock_held_elsewhere_times_out_with_its_reason(tmp_path):
    holder, waiter = FileAliasLock(tmp_path, timeout_s=5), FileAliasLock(tmp_path, timeout_s=0.3)
    with holder.held("m"):
        with pytest.raises(
            AliasLockUnavailable, match=r"another move of the production alias of m held its lock .* for over 0.3 s; nothing was moved"
        ):
            with waiter.held("m"):
                pass
        with waiter.held("another-model"):  # one lock per model
            pass
    with waiter.held("m"):  # released with its block
        pass


def test_the_file_lock_excludes_another_process(tmp_path):
    """flock is per open file, so the same lock from another process waits too (here a child holds it while this one tries)."""
    ready = tmp_path / "ready"
    code = (
        "from modelcd_assets.lib.release.alias_lock import FileAliasLock\nimport pathlib, time\n"
        f"with FileAliasLock(pathlib.Path({str(tmp_path)!r})).held('m'):\n"
        f"    pathlib.Path({str(ready)!r}).touch()\n    time.sleep(30)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the child never took the lock"
        with pytest.raises(AliasLockUnavailable):
            with FileAliasLock(tmp_path, timeout_s=0.2).held("m"):
                pass
    finally:
        child.kill()
        child.wait(timeout=60)
    with FileAliasLock(tmp_path, timeout_s=30).held("m"):  # a lock dies with its holder
        pass


@pytest.mark.postgres
def test_an_advisory_lock_held_elsewhere_times_out_with_its_reason(pg_server):
    holder, waiter = PostgresAliasLock(pg_server.url, timeout_s=5), PostgresAliasLock(pg_server.url, timeout_s=0.3)
    name = f"m-{uuid.uuid4().hex[:8]}"
    with holder.held(name):
        with pytest.raises(
            AliasLockUnavailable,
            match=rf"another move of the production alias of {name} held its lock \(pg_advisory_xact_lock on "
            r"postgresql\+psycopg2://[^:]+:\*\*\*@.*\) for over 0.3 s; nothing was moved",
        ):
            with waiter.held(name):
                pass
        with waiter.held(f"{name}-other"):
            pass
    with waiter.held(name):
        pass


def test_a_postgres_server_that_does_not_answer_is_no_lock():
    with socket.socket() as s:  # a port bound and closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql+psycopg2://u:secret@127.0.0.1:{port}/dagster"
    with pytest.raises(AliasLockUnavailable, match=r"could not reach .*u:\*\*\*@.*nothing was moved") as e:
        with PostgresAliasLock(url, timeout_s=2).held("m"):
            pass
    assert "secret" not in str(e.value)


def test_lock_keys_are_stable_and_per_model():
    assert lock_key("ticket-intent") == lock_key("ticket-intent") != lock_key("ticket-intent-2")
    assert -(2**63) <= lock_key("ticket-intent") < 2**63
