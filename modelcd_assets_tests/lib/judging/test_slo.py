"""SLO verdicts from PromQL values: pass, fail or inconclusive, and the queries they come from."""

import pytest

from modelcd_assets.lib.judging.policy import SloPolicy
from modelcd_assets.lib.judging.slo import FAIL, INCONCLUSIVE, PASS, PrometheusUnavailable, judge_slo, query, slo_queries

POLICY = SloPolicy(p99_latency_ms=100, max_error_ratio=0.01, max_nan_ratio=0.0, min_samples=50, window="1m")
HEALTHY = {"samples": 500.0, "p99_latency_ms": 40.0, "error_ratio": 0.0, "nan_ratio": 0.0}


@pytest.mark.parametrize(
    "values, outcome, reason",
    [
        (HEALTHY, PASS, ""),
        ({**HEALTHY, "p99_latency_ms": 180.0}, FAIL, "p99_latency_ms 180 > 100"),
        ({**HEALTHY, "error_ratio": 0.02}, FAIL, "error_ratio 0.02 > 0.01"),
        ({**HEALTHY, "nan_ratio": 0.002}, FAIL, "nan_ratio 0.002 > 0"),
        ({**HEALTHY, "samples": 49.0, "p99_latency_ms": 900.0}, INCONCLUSIVE, "49 requests in the last 1m, fewer than the 50 needed"),
        ({**HEALTHY, "samples": None}, INCONCLUSIVE, "0 requests"),
        ({**HEALTHY, "p99_latency_ms": None}, INCONCLUSIVE, "no data for p99_latency_ms"),
    ],
)
def test_verdicts(values, outcome, reason):
    verdict = judge_slo(values, POLICY)
    assert verdict.outcome == outcome
    assert reason in " ".join(verdict.reasons)


LM_POLICY = SloPolicy(p99_ttft_ms=500, p99_tpot_ms=50, max_error_ratio=0.01, min_samples=50, window="1m")
LM_HEALTHY = {"samples": 500.0, "p99_ttft_ms": 120.0, "p99_tpot_ms": 9.0, "error_ratio": 0.0, "nan_ratio": 0.0}


@pytest.mark.parametrize(
    "values, outcome, reason",
    [
        (LM_HEALTHY, PASS, ""),
        ({**LM_HEALTHY, "p99_ttft_ms": 900.0}, FAIL, "p99_ttft_ms 900 > 500"),
        ({**LM_HEALTHY, "p99_tpot_ms": 75.0}, FAIL, "p99_tpot_ms 75 > 50"),
        ({**LM_HEALTHY, "p99_tpot_ms": None}, INCONCLUSIVE, "no data for p99_tpot_ms"),
    ],
)
def test_a_causal_lm_is_judged_on_time_to_first_token_and_per_output_token(values, outcome, reason):
    verdict = judge_slo(values, LM_POLICY)
    assert verdict.outcome == outcome and reason in " ".join(verdict.reasons)


def test_a_causal_lm_queries_its_token_histograms_and_no_request_latency():
    q = slo_queries("support-reply", "3", "5m", "causal-lm")
    assert set(q) == {"samples", "p99_ttft_ms", "p99_tpot_ms", "error_ratio", "nan_ratio"}
    assert (
        "modelcd_llm_time_to_first_token_seconds_bucket{" in q["p99_ttft_ms"]
        and "modelcd_llm_time_per_output_token_seconds_bucket{" in q["p99_tpot_ms"]
    )
    assert all('model="support-reply",version="3"' in v for v in q.values())


def test_queries_select_the_production_version_over_the_window():
    q = slo_queries("ticket-intent", "7", "5m", "classification")
    assert q["p99_latency_ms"].startswith("1000 * histogram_quantile(0.99, sum by (le) (rate(modelcd_request_duration_seconds_bucket{")
    assert all('model="ticket-intent",version="7"' in v and "[5m]" in v for v in q.values())


def test_an_unreachable_prometheus_is_an_error_not_a_verdict():
    with pytest.raises(PrometheusUnavailable, match="unreachable"):
        query("http://127.0.0.1:9", "up")
