"""A step's live reads against a real Prometheus holding known samples (written with promtool, as a backfill): CI's
fault sandbox met production's latency buckets out of order ([6796, 7878, 7600, ...]: "not a cumulative histogram") when
the step read increase(); the reads count what each bucket grew by from the raw samples instead."""

from __future__ import annotations

import math
import subprocess
import time

import pytest

from modelcd_assets.lib.judging.live_queries import _count, counter_query, histogram_query, read_histogram
from modelcd_assets.lib.judging.live_stats import Binned
from modelcd_assets.lib.judging.slo import query_vector
from modelcd_assets.lib.operations.prometheus_server import PrometheusServer, prometheus_binary
from modelcd_assets_tests.serving.conftest import free_port

H = "modelcd_request_duration_seconds"
SEL = 'model="m",version="7",instance="127.0.0.1:8000",job="modelcd-serve"'
BOUNDS = ("0.005", "0.01", "+Inf")


def _openmetrics(end: int) -> str:
    """Scrapes every 2 s over the 40 s before end: a histogram whose server restarted 10 s before end (its fast bucket
    dipped, its slower ones did not), and a counter created 20 s before end with 3 requests at its first scrape."""
    lines = [f"# TYPE {H} histogram"]
    for i, le in enumerate(BOUNDS):
        for k in range(21):
            t = end - 40 + 2 * k
            if t < end - 10:  # the first server: 2 fast requests a scrape
                counts = [60 + 2 * k] * 3
            else:  # the second: 50 fast and 51 slower ones before its first scrape, one more slower one each scrape
                n = (t - (end - 10)) // 2
                counts = [50, 101 + n, 101 + n]
            lines.append(f'{H}_bucket{{{SEL},le="{le}"}} {counts[i]} {t}')
    lines.append("# TYPE modelcd_requests counter")
    for k in range(11):
        t = end - 20 + 2 * k
        lines.append(f"modelcd_requests_total{{{SEL}}} {3 + k} {t}")
    lines.append("# TYPE modelcd_requests_created gauge")
    for k in range(11):
        lines.append(f"modelcd_requests_created{{{SEL}}} {end - 21} {end - 20 + 2 * k}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A Prometheus serving the samples above, and the time they end."""
    folder = tmp_path_factory.mktemp("prometheus")
    end = int(time.time()) - 5
    (folder / "samples.om").write_text(_openmetrics(end))
    promtool = prometheus_binary().parent / "promtool"
    if not promtool.is_file():
        pytest.fail(f"no promtool beside {prometheus_binary()}: run scripts/install-prometheus.sh (make install does)")
    subprocess.run(
        [str(promtool), "tsdb", "create-blocks-from", "openmetrics", str(folder / "samples.om"), str(folder / "tsdb")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    with PrometheusServer(folder, free_port(), []) as prometheus:
        yield prometheus.url, end


def test_increase_puts_a_restarted_servers_buckets_out_of_order_and_the_raw_samples_do_not(stored):
    url, end = stored
    at, seconds = end + 1, 30
    rows = query_vector(url, f'sum by (le) (increase({H}_bucket{{model="m",version="7"}}[{seconds}s] @ {at}))')
    old = [v for _, v in sorted((float(labels["le"]), v) for labels, v in rows)]
    assert old[0] > old[1], f"the fault this test holds no longer shows in increase(): {old}"
    with pytest.raises(ValueError, match="not a cumulative histogram"):
        Binned.from_buckets([0.005, 0.01, math.inf], old)

    sample = read_histogram(url, histogram_query(H, "m", "7", seconds), at, at - seconds)
    # From the scrape at end - 30 (70 fast): 2 fast a scrape to end - 12 (9 scrapes), then the new server's 50 fast and 51
    # slower, then 1 slower a scrape for 5 scrapes: 68 fast, 56 slower.
    assert list(sample.values) == [0.005, 0.01] and list(sample.counts) == [68, 56]


def test_a_counter_created_inside_the_step_keeps_its_first_scrapes_requests(stored):
    url, end = stored
    at = end + 1
    assert _count(url, counter_query("modelcd_requests_total", "m", "7", 30), at, at - 30) == 3 + 10
    increase = query_vector(url, f'sum(increase(modelcd_requests_total{{model="m",version="7"}}[30s] @ {at}))')[0][1]
    assert increase < 13, f"increase() counted {increase}: the first scrape's requests were thought lost there"
    assert _count(url, counter_query("modelcd_requests_total", "m", "8", 30), at, at - 30) == 0, "no series: it never moved"
