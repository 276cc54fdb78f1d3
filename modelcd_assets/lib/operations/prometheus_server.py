"""A real Prometheus server on loopback, with a scrape config for modelcd's serving processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import yaml

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.operations.processes import start_process, stop_process

REPO_BINARY = Path(__file__).resolve().parents[3] / ".tools" / "prometheus" / "usr" / "bin" / "prometheus"


def prometheus_binary() -> Path:
    """MODELCD_PROMETHEUS_BIN, else the copy scripts/install-prometheus.sh unpacked, else prometheus on PATH."""
    explicit = os.environ.get("MODELCD_PROMETHEUS_BIN")
    for candidate in (explicit, str(REPO_BINARY), shutil.which("prometheus")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise ModelcdError(
        "no Prometheus server binary found: run scripts/install-prometheus.sh (make install does), or set MODELCD_PROMETHEUS_BIN"
    )


class PrometheusServer:
    """Starts Prometheus scraping targets every scrape_interval; stop() ends it. Listens on 127.0.0.1 only."""

    def __init__(self, data_dir: Path, port: int, targets: list[str], scrape_interval: str = "5s"):
        self.data_dir, self.port, self.targets, self.scrape_interval = Path(data_dir), port, targets, scrape_interval
        self.process: subprocess.Popen | None = None
        self._log = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> dict:
        return {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.scrape_interval},
            "scrape_configs": [{"job_name": "modelcd-serve", "metrics_path": "/metrics", "static_configs": [{"targets": self.targets}]}],
        }

    def start(self, timeout: float = 30.0) -> "PrometheusServer":
        binary = prometheus_binary()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        self._log = log = open(self.data_dir / "prometheus.log", "ab")
        # die_with_parent: a Prometheus left behind by a killed parent holds its port and its TSDB lock.
        self.process = start_process(
            [
                str(binary),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.data_dir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=15d",
                "--log.level=warn",
            ],
            die_with_parent=True,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ModelcdError(
                    f"Prometheus exited with code {self.process.returncode}; see {self.data_dir / 'prometheus.log'} (is port {self.port}"
                    " taken?)"
                )
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise ModelcdError(f"Prometheus did not become ready on {self.url} within {timeout:.0f} s; see {self.data_dir / 'prometheus.log'}")

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, timeout=10)
        if self._log is not None:
            self._log.close()
        self.process, self._log = None, None

    def __enter__(self) -> "PrometheusServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
