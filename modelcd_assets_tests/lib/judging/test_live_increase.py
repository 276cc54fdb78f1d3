"""A step's growth, counted from raw samples: whole requests, cumulative in `le`, across restarts and births in the
window (lib/judging/live_increase.py)."""

from __future__ import annotations

import math

from modelcd_assets.lib.judging.live_increase import Series, window_growth

H = "lat"
SERVER = {"model": "m", "version": "7", "instance": "127.0.0.1:8000"}


def histogram(scrapes: list[tuple[float, list[float]]], bounds=(0.005, 0.01, math.inf), created=None, **labels) -> list[Series]:
    """A histogram's bucket series from scrapes of (time, cumulative counts per bound); created: (time, value) pairs."""
    base = {**SERVER, **labels}
    series = [
        Series({"__name__": f"{H}_bucket", **base, "le": "+Inf" if math.isinf(b) else str(b)}, [(t, counts[i]) for t, counts in scrapes])
        for i, b in enumerate(bounds)
    ]
    if created is not None:
        series.append(Series({"__name__": f"{H}_created", **base}, created))
    return series


def test_a_restart_that_only_some_buckets_show_is_still_a_reset_of_them_all():
    # Before the restart, 40 fast requests (both buckets 60 -> 100); after it the new server answered 50 fast and 51 slower
    # ones before its first scrape. The fast bucket dips, the other one does not: increase() would count 90 and 41.
    scrapes = [(0.0, [60, 60, 60]), (10.0, [80, 80, 80]), (20.0, [100, 100, 100]), (30.0, [50, 101, 101]), (40.0, [60, 111, 111])]
    assert window_growth(histogram(scrapes), start=5.0) == {0.005: 20 + 20 + 50 + 10, 0.01: 20 + 20 + 101 + 10, math.inf: 151}


def test_growth_out_of_order_across_buckets_reveals_a_reset_no_bucket_dipped_for():
    # Pre-restart [5, 10]; the new server's first scrape [9, 11]: no bucket went down, yet 4 fast and 1 in all cannot be.
    scrapes = [(0.0, [5, 10, 10]), (10.0, [9, 11, 11])]
    assert window_growth(histogram(scrapes), start=5.0) == {0.005: 9, 0.01: 11, math.inf: 11}


def test_a_changed_created_time_is_a_reset_even_when_every_count_grew():
    scrapes = [(0.0, [5, 10, 10]), (10.0, [6, 12, 12])]
    created = [(0.0, 1000.0), (10.0, 1008.0)]
    assert window_growth(histogram(scrapes, created=created), start=5.0) == {0.005: 6, 0.01: 12, math.inf: 12}
    assert window_growth(histogram(scrapes, created=[(0.0, 1000.0), (10.0, 1000.0)]), start=5.0) == {0.005: 1, 0.01: 2, math.inf: 2}


def test_a_series_created_inside_the_window_keeps_its_first_scrapes_requests():
    scrapes = [(10.0, [3, 4, 4]), (20.0, [5, 9, 9])]
    assert window_growth(histogram(scrapes, created=[(10.0, 8.0), (20.0, 8.0)]), start=5.0) == {0.005: 5, 0.01: 9, math.inf: 9}
    # Created before the window with no scrape before it: what it held then is unknown, so it starts from its first scrape.
    assert window_growth(histogram(scrapes, created=[(10.0, 1.0), (20.0, 1.0)]), start=5.0) == {0.005: 2, 0.01: 5, math.inf: 5}
    # No _created at all (another exporter): from its first scrape too, as increase() does.
    assert window_growth(histogram(scrapes), start=5.0) == {0.005: 2, 0.01: 5, math.inf: 5}


def test_the_window_starts_at_the_last_scrape_before_it_and_replicas_add_up():
    one = histogram([(0.0, [1, 1, 1]), (4.0, [2, 3, 3]), (8.0, [4, 6, 6])])
    other = histogram([(1.0, [0, 0, 0]), (9.0, [7, 7, 7])], instance="127.0.0.1:8001")
    assert window_growth(one + other, start=5.0) == {0.005: 2 + 7, 0.01: 3 + 7, math.inf: 3 + 7}
    assert window_growth(one, start=8.0) == {0.005: 0, 0.01: 0, math.inf: 0}, "nothing scraped after the start grew nothing"


def test_a_counter_grows_by_whole_requests_across_a_restart():
    counter = Series({"__name__": "reqs_total", **SERVER}, [(0.0, 100.0), (10.0, 130.0), (20.0, 7.0), (30.0, 12.0)])
    assert window_growth([counter], start=1.0) == {0.0: 30 + 7 + 5}
    assert window_growth([], start=1.0) == {}
