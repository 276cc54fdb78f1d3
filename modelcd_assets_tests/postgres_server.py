"""The PostgreSQL server scripts/postgres.sh runs, once per test session, for the postgres-marked tests.

MODELCD_SKIP_POSTGRES=1 skips them; without it, a server that does not start is an error, never a skip.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "postgres.sh"
START_TIMEOUT = 600  # the first start on a fresh machine installs Debian's postgresql


def script(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env={**os.environ, "MODELCD_HOME": str(home)}, capture_output=True, text=True, timeout=timeout
    )


def libpq(url: str) -> str:
    """The URL in the form psycopg2.connect takes (no SQLAlchemy driver suffix)."""
    return url.replace("postgresql+psycopg2://", "postgresql://", 1)


def query(url: str, sql: str, *params) -> list[tuple]:
    """Rows of one statement, committed, on a connection of its own."""
    conn = psycopg2.connect(libpq(url))
    try:
        with conn, conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


@dataclass(frozen=True)
class Server:
    home: Path
    url: str
    start_seconds: float

    @property
    def folder(self) -> Path:
        return self.home / "postgres"


@pytest.fixture(scope="session")
def pg_server():
    if os.environ.get("MODELCD_SKIP_POSTGRES"):
        pytest.skip("MODELCD_SKIP_POSTGRES is set: no PostgreSQL server for these tests")
    # Not under pytest's basetemp, which is 0700: as root the server runs as the postgres user, which must reach the
    # folder. Short, too: the unix socket's path is limited to 107 bytes.
    home = Path(tempfile.mkdtemp(prefix="mcd-pg-"))
    home.chmod(0o755)
    began = time.monotonic()
    started = script(home, "start", timeout=START_TIMEOUT)
    seconds = time.monotonic() - began
    if started.returncode != 0:
        shutil.rmtree(home, ignore_errors=True)
        pytest.fail(
            f"scripts/postgres.sh start failed (exit {started.returncode}); set MODELCD_SKIP_POSTGRES=1 to skip the "
            f"postgres tests on a machine without PostgreSQL:\n{started.stderr}",
            pytrace=False,
        )
    print(f"\nscripts/postgres.sh start: {seconds:.1f} s", file=sys.stderr)
    yield Server(home, started.stdout.strip(), seconds)
    stopped = script(home, "stop")
    shutil.rmtree(home, ignore_errors=True)
    assert stopped.returncode == 0, f"scripts/postgres.sh stop failed:\n{stopped.stderr}"
