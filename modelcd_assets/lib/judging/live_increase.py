"""How much a counter, or each bucket of a histogram, grew in a window: exact, from the raw samples Prometheus stored.

PromQL's increase() does not serve a rollout's judge. It extrapolates each series to the window's edges on its own, so a
histogram's buckets come out fractional and, around a server restart, out of order: reset detection is per series, and a
bucket whose count after the restart already passed its count before it is not seen to reset while the others are. CI
met it: production's latency buckets read [6796, 7878, 7600, ...] in the fault sandbox. And a series born inside the
window loses its first scrape's requests. Here every series set (a histogram's buckets of one server and version, or one
counter) is read scrape by scrape:
- between two scrapes each bucket grew by the difference, unless the set was reset in between: a bucket went down, the
  growth is out of order across buckets (impossible without a reset), or the exporter's `_created` time changed; then
  each bucket grew by its whole count after the reset;
- the window starts from the last scrape at or before its start; a set without one that was created inside the window
  (its `_created` time says so) starts from zero, and one without either starts from its first scrape, as increase() does.
So every bucket's growth is a whole number of requests, and a histogram's growth is cumulative in `le` by construction.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

CREATED_SUFFIX = "_created"


@dataclass(frozen=True)
class Series:
    """One stored series: its labels (with __name__) and its samples, (timestamp in seconds, value), ascending."""

    labels: dict[str, str]
    samples: list[tuple[float, float]]


def _set_key(labels: dict[str, str]) -> tuple:
    """The series set a series belongs to: every label but the name and the bucket's bound."""
    return tuple(sorted((k, v) for k, v in labels.items() if k not in ("__name__", "le")))


def _bound(labels: dict[str, str]) -> float:
    """A bucket's upper bound, or 0 for a counter (one series per set)."""
    return float(labels["le"]) if "le" in labels else 0.0


def _set_growth(values: dict[float, dict[float, float]], created: dict[float, float], start: float) -> dict[float, float]:
    """One set's growth per bound since start. values: timestamp -> bound -> value; created: timestamp -> `_created`."""
    bounds = sorted({b for row in values.values() for b in row})
    times = sorted(values)
    before = [t for t in times if t <= start]
    inside = [t for t in times if t > start]
    growth = dict.fromkeys(bounds, 0.0)
    if not inside:
        return growth
    if before:
        previous, previous_created = values[before[-1]], created.get(before[-1])
    else:
        born = created.get(inside[0])
        previous = dict.fromkeys(bounds, 0.0) if born is not None and born > start else values[inside[0]]
        previous_created = born
    for t in inside:
        row, row_created = values[t], created.get(t)
        if set(row) != set(previous):  # a scrape that lacks a bucket the last one had: start over from this one
            previous, previous_created = row, row_created
            continue
        delta = [row[b] - previous[b] for b in bounds if b in row]
        reset = (
            any(d < 0 for d in delta)
            or any(later < earlier for earlier, later in zip(delta, delta[1:], strict=False))
            or (row_created is not None and previous_created is not None and row_created != previous_created)
        )
        for b in row:
            growth[b] += row[b] if reset else row[b] - previous[b]
        previous, previous_created = row, row_created
    return growth


def window_growth(series: list[Series], start: float) -> dict[float, float]:
    """The growth after start of the counter, or of each histogram bucket (by `le`; a counter's at 0), summed over every
    series set in series (every server and every label set the query matched). Series named ..._created give each set's
    creation time; all others are the counter's, or the buckets'."""
    values: dict[tuple, dict[float, dict[float, float]]] = defaultdict(lambda: defaultdict(dict))
    created: dict[tuple, dict[float, float]] = defaultdict(dict)
    for s in series:
        key = _set_key(s.labels)
        if s.labels.get("__name__", "").endswith(CREATED_SUFFIX):
            created[key].update({t: v for t, v in s.samples})
            continue
        for t, v in s.samples:
            if not math.isnan(v):
                values[key][t][_bound(s.labels)] = v
    total: dict[float, float] = defaultdict(float)
    for key, rows in values.items():
        for bound, grew in _set_growth(rows, created.get(key, {}), start).items():
            total[bound] += grew
    return dict(total)
