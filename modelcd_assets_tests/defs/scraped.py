"""A real Prometheus on loopback scraping a real exporter that a test feeds, and one tick of a sensor against it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
from prometheus_client import start_http_server

from modelcd_assets.lib.operations.prometheus_server import PrometheusServer
from modelcd_assets.serving.metrics import ServerMetrics
from modelcd_assets_tests.serving.conftest import free_port


@contextmanager
def scraped(folder: Path, feed: Callable[[ServerMetrics, int], None]) -> Iterator[str]:
    """Prometheus's URL while feed(metrics, i) runs every 10 ms on a server's metrics, scraped every second."""
    metrics = ServerMetrics(node_usd_per_hour=0.1)
    port = free_port()
    server, _ = start_http_server(port, addr="127.0.0.1", registry=metrics.registry)
    stop = threading.Event()

    def traffic() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            feed(metrics, i)
            time.sleep(0.01)

    threading.Thread(target=traffic, daemon=True).start()
    try:
        with PrometheusServer(folder, free_port(), [f"127.0.0.1:{port}"], scrape_interval="1s") as prometheus:
            yield prometheus.url
    finally:
        stop.set()
        server.shutdown()


def tick(sensor, env, url: str, cursor: str | None) -> dg.SensorResult:
    """One evaluation of sensor with the test env's resources and Prometheus at url."""
    with dg.instance_for_test() as instance:
        return sensor(dg.build_sensor_context(cursor=cursor, instance=instance, resources=env.sensor_resources(url)))
