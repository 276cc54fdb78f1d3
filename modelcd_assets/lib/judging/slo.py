"""Production SLOs read from Prometheus with PromQL, judged pass, fail or inconclusive."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import httpx

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.policy import SloPolicy
from modelcd_assets.lib.tasks.names import declaration_of

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"


class PrometheusUnavailable(ModelcdError):
    """Prometheus could not be queried; no decision may be taken on what it would have said."""


def slo_queries(model: str, version: str, window: str, task: str) -> dict[str, str]:
    """The PromQL the SLO is judged on, for one production version: the p99 of each latency histogram its task declares
    (TaskDeclaration.slo_latency: a classifier's request latency, a causal LM's time to first token and per output token),
    and errors and NaN outputs for every task."""
    sel = f'model="{model}",version="{version}"'
    requests = f"sum(increase(modelcd_requests_total{{{sel}}}[{window}]))"

    def p99_ms(histogram: str) -> str:
        return f"1000 * histogram_quantile(0.99, sum by (le) (rate({histogram}_bucket{{{sel}}}[{window}])))"

    latency = {name: p99_ms(histogram) for name, histogram in declaration_of(task).slo_latency}
    return {
        "samples": requests,
        **latency,
        # "or vector(0)": a counter that never moved may have no series at all, which is zero, not "no data".
        "error_ratio": f"(sum(increase(modelcd_request_errors_total{{{sel}}}[{window}])) or vector(0)) / {requests}",
        "nan_ratio": f"(sum(increase(modelcd_nan_outputs_total{{{sel}}}[{window}])) or vector(0)) / {requests}",
    }


def _instant(url: str, promql: str, timeout: float, at: float | None = None) -> dict:
    """One instant query's data (at: its evaluation time, Unix seconds; None: Prometheus's now)."""
    params = {"query": promql} if at is None else {"query": promql, "time": f"{at:.3f}"}
    try:
        resp = httpx.get(f"{url.rstrip('/')}/api/v1/query", params=params, timeout=timeout)
    except httpx.HTTPError as e:
        raise PrometheusUnavailable(f"Prometheus at {url} is unreachable: {e}") from e
    if resp.status_code != 200:
        raise PrometheusUnavailable(f"Prometheus at {url} answered {resp.status_code} to {promql!r}: {resp.text[:200]}")
    body = resp.json()
    if body.get("status") != "success":
        raise PrometheusUnavailable(f"Prometheus at {url} refused {promql!r}: {body.get('error')}")
    return body["data"]


def query_vector(url: str, promql: str, timeout: float = 5.0) -> list[tuple[dict[str, str], float]]:
    """One instant query: every series' labels and value."""
    return [(r["metric"], float(r["value"][1])) for r in _instant(url, promql, timeout)["result"]]


def query_samples(url: str, promql: str, at: float, timeout: float = 10.0) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
    """One range selector (a PromQL `name{...}[5m]`) evaluated at `at`: every series' labels and raw samples, (timestamp,
    value) ascending, as Prometheus stored them."""
    data = _instant(url, promql, timeout, at)
    if data.get("resultType") != "matrix":
        raise PrometheusUnavailable(f"Prometheus at {url} answered {promql!r} with a {data.get('resultType')}, not a range of samples")
    return [(r["metric"], [(float(t), float(v)) for t, v in r["values"]]) for r in data["result"]]


def query(url: str, promql: str, timeout: float = 5.0) -> float | None:
    """One instant query for a single number; None when it returns no series (no data) or NaN."""
    result = query_vector(url, promql, timeout)
    if not result:
        return None
    value = result[0][1]
    return None if math.isnan(value) else value


def served_versions(url: str, model: str) -> list[str]:
    """The versions that scraped servers of model say they serve by default right now."""
    return sorted({labels.get("version", "?") for labels, value in query_vector(url, f'modelcd_serving_info{{model="{model}"}} == 1')})


@dataclass(frozen=True)
class SloVerdict:
    outcome: str
    values: dict[str, float | None]
    reasons: list[str] = field(default_factory=list)
    queries: dict[str, str] = field(default_factory=dict)


def judge_slo(values: dict[str, float | None], policy: SloPolicy) -> SloVerdict:
    """fail when any measured value breaks its threshold; inconclusive with too few samples or missing values."""
    samples = values.get("samples") or 0.0
    if samples < policy.min_samples:
        return SloVerdict(
            INCONCLUSIVE, values, [f"{samples:.0f} requests in the last {policy.window}, fewer than the {policy.min_samples} needed"]
        )
    limits = {
        "p99_latency_ms": policy.p99_latency_ms,
        "p99_ttft_ms": policy.p99_ttft_ms,
        "p99_tpot_ms": policy.p99_tpot_ms,
        "error_ratio": policy.max_error_ratio,
        "nan_ratio": policy.max_nan_ratio,
    }
    limits = {name: limit for name, limit in limits.items() if name in values}  # the ones this task's queries measure
    broken = [
        f"{name} {values[name]:.4g} > {limit:.4g}"
        for name, limit in limits.items()
        if values.get(name) is not None and values[name] > limit
    ]
    if broken:
        return SloVerdict(FAIL, values, broken)
    missing = [name for name in limits if values.get(name) is None]
    if missing:
        return SloVerdict(INCONCLUSIVE, values, [f"no data for {', '.join(missing)}"])
    return SloVerdict(PASS, values, [])


def evaluate_slo(url: str, model: str, version: str, policy: SloPolicy, task: str) -> SloVerdict:
    """Query and judge one production version; raises PrometheusUnavailable when Prometheus cannot answer."""
    queries = slo_queries(model, version, policy.window, task)
    values = {name: query(url, promql) for name, promql in queries.items()}
    verdict = judge_slo(values, policy)
    reasons = list(verdict.reasons)
    if not values.get("samples"):
        serving = served_versions(url, model)
        if serving and version not in serving:
            reasons.append(
                f"the servers serve version {', '.join(serving)}, not production {version}: its load may have been refused (see the server"
                " log)"
            )
    return SloVerdict(verdict.outcome, verdict.values, reasons, queries)
