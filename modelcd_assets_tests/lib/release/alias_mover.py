"""One process of the alias lock's race test: promotion's compare-and-set on its own, with no Dagster run or pool around it.

python -m modelcd_assets_tests.lib.release.alias_mover LOCK NAME VERSION EXPECTED BARRIER N
  LOCK: file:FOLDER, postgres:URL or none (no lock: what the test shows the race with); EXPECTED: the production the move
  compares with; BARRIER: a folder where N processes meet before any of them compares.
Exit 0 moved, 3 superseded, 4 the move read back lost, 5 the lock was not taken; the error's words on stderr.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from modelcd_assets.lib.errors import Superseded
from modelcd_assets.lib.release.alias_lock import AliasLockUnavailable, AliasMoveLost, FileAliasLock, PostgresAliasLock
from modelcd_assets.lib.release.registry import CandidateRef, Registry

BARRIER_TIMEOUT_S = 300


class NoLock:
    """No lock at all: every process goes straight to its compare and set."""

    shown = "no lock"

    @contextlib.contextmanager
    def held(self, name: str):
        yield


def lock_of(spec: str):
    kind, _, where = spec.partition(":")
    return {"file": lambda: FileAliasLock(Path(where)), "postgres": lambda: PostgresAliasLock(where), "none": NoLock}[kind]()


def meet(barrier: Path, n: int) -> None:
    """Wait until all n processes are ready, so that their compares fall inside each other's sleep."""
    (barrier / f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + BARRIER_TIMEOUT_S
    while len(list(barrier.glob("ready-*"))) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(list(barrier.glob('ready-*')))} of {n} processes reached the barrier in {BARRIER_TIMEOUT_S} s")
        time.sleep(0.02)


def main(argv: list[str]) -> int:
    spec, name, version, expected, barrier, n = argv
    registry, lock = Registry.from_env(), lock_of(spec)
    ref, baseline = CandidateRef(name, version), CandidateRef(name, expected)
    registry.version(ref)  # the registry's first answer (and its imports) before the barrier, not inside the race
    meet(Path(barrier), int(n))
    try:
        registry.move_production(ref, {"run_id": f"alias-mover-{os.getpid()}", "judged_against": expected}, expected=baseline, lock=lock)
    except Superseded as e:
        print(f"superseded: {e}", file=sys.stderr)
        return 3
    except AliasMoveLost as e:
        print(f"lost: {e}", file=sys.stderr)
        return 4
    except AliasLockUnavailable as e:
        print(f"no lock: {e}", file=sys.stderr)
        return 5
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
