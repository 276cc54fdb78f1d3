"""The lock every writer of a production alias holds around its compare and its set: promotion and rollback.

The Dagster pool `modelcd_promotion` (limit 1) is kept, but a pool's slot is no proof that nothing else moves the alias:
on SQLite, Dagster's slot claim SELECTs a free slot `FOR UPDATE SKIP LOCKED`, which SQLite ignores, and two processes can
claim the one slot. So modelcd takes its own lock, keyed by the model's name:

- embedded defaults (every writer on one machine, one state folder): `fcntl.flock` on `<state>/locks/production-<name>.lock`;
- PostgreSQL (the Kubernetes deployment, where run pods share the Dagster database): `pg_advisory_xact_lock` on that database,
  in a transaction held open from the compare to the set.

A lock that is not taken within its bound raises AliasLockUnavailable, and nothing moves.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

DEFAULT_TIMEOUT_S = 60.0
_POLL_S = 0.05


class AliasLockUnavailable(Exception):
    """The production alias's lock could not be taken (in time, or at all); nothing was moved."""


class AliasMoveLost(Exception):
    """A move of the production alias read back as something else than it set: another writer moved it without the lock."""


class AliasLock(Protocol):
    """Exclusive right to move one model's production alias, held for the duration of the with-block."""

    def held(self, name: str) -> contextlib.AbstractContextManager[None]: ...

    @property
    def shown(self) -> str: ...


def lock_key(name: str) -> int:
    """The signed 64-bit advisory-lock key of a model's production alias: the same in every process and on every machine."""
    return int.from_bytes(hashlib.sha256(f"modelcd.production:{name}".encode()).digest()[:8], "big", signed=True)


def _said(e: Exception) -> str:
    """A driver's error on one line (libpq's span several)."""
    return " ".join(str(e).split())


class FileAliasLock:
    """An flock on a file per model under folder: every writer that shares the folder (one machine, one state folder)."""

    def __init__(self, folder: Path, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.folder = Path(folder)
        self.timeout_s = timeout_s

    @property
    def shown(self) -> str:
        return f"flock under {self.folder}"

    def path(self, name: str) -> Path:
        # A model name may hold characters a file name should not; its hash names the file, the name is written inside.
        return self.folder / f"production-{hashlib.sha256(name.encode()).hexdigest()[:16]}.lock"

    @contextlib.contextmanager
    def held(self, name: str) -> Iterator[None]:
        path = self.path(name)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise AliasLockUnavailable(f"could not open the production alias lock of {name} ({path}): {e}; nothing was moved") from e
        try:
            deadline = time.monotonic() + self.timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise AliasLockUnavailable(
                            f"could not lock {path} for the production alias of {name}: {e}; nothing was moved"
                        ) from e
                    if time.monotonic() >= deadline:
                        raise AliasLockUnavailable(
                            f"another move of the production alias of {name} held its lock ({path}) for over {self.timeout_s:g} s; "
                            "nothing was moved: see which modelcd run is still moving it (Dagster UI, pool modelcd_promotion), "
                            "then gate again"
                        ) from None
                    time.sleep(_POLL_S)
            os.ftruncate(fd, 0)
            os.write(fd, f"{name}\n{os.getpid()}\n".encode())
            yield
        finally:
            os.close(fd)  # releases the flock


class PostgresAliasLock:
    """pg_advisory_xact_lock keyed by the model's name on the database url names, held in a transaction until the block ends."""

    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.url = url
        self.timeout_s = timeout_s

    @property
    def shown(self) -> str:
        from sqlalchemy.engine import make_url

        return f"pg_advisory_xact_lock on {make_url(self.url).render_as_string(hide_password=True)}"

    def _dsn(self) -> str:
        from sqlalchemy.engine import make_url

        # Dagster and MLflow are given postgresql+psycopg2:// (lib/operations/instance_config.py); libpq takes postgresql://.
        return make_url(self.url).set(drivername="postgresql").render_as_string(hide_password=False)

    @contextlib.contextmanager
    def held(self, name: str) -> Iterator[None]:
        import psycopg2
        from psycopg2 import errors

        try:
            conn = psycopg2.connect(self._dsn(), connect_timeout=max(1, int(self.timeout_s)))
        except psycopg2.Error as e:
            raise AliasLockUnavailable(
                f"could not reach {self.shown} for the production alias of {name}: {_said(e)}; nothing was moved"
            ) from e
        try:
            with conn.cursor() as cur:
                # The transaction psycopg2 opens holds the lock until commit or rollback; lock_timeout bounds the wait.
                cur.execute("SET LOCAL lock_timeout = %s", (f"{int(self.timeout_s * 1000)}ms",))
                try:
                    cur.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(name),))
                except errors.LockNotAvailable:
                    raise AliasLockUnavailable(
                        f"another move of the production alias of {name} held its lock ({self.shown}) for over {self.timeout_s:g} s; "
                        "nothing was moved: see which modelcd run is still moving it (Dagster UI, pool modelcd_promotion), then gate again"
                    ) from None
                except psycopg2.Error as e:
                    raise AliasLockUnavailable(
                        f"could not take {self.shown} for the production alias of {name}: {_said(e)}; nothing was moved"
                    ) from e
            yield
            # A lock lost with its connection (a server restart) would let another writer in; the commit says whether it held.
            try:
                conn.commit()
            except psycopg2.Error as e:
                raise AliasLockUnavailable(
                    f"the connection holding {self.shown} for the production alias of {name} broke before "
                    f"the move ended ({_said(e)}); check the alias with 'modelcd audit {name}'"
                ) from e
        finally:
            conn.close()
