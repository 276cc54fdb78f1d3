"""Gate verdicts: pure functions from measurements and policy to pass, fail or inconclusive."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from modelcd_assets.lib.judging.policy import (
    AccuracyPolicy,
    CostPolicy,
    DriftPolicy,
    FidelityPolicy,
    GenerationPolicy,
    HealthPolicy,
    PerplexityPolicy,
    ThroughputPolicy,
    TokenFidelityPolicy,
)
from modelcd_assets.lib.judging.promotion import NO_CASES
from modelcd_assets.lib.judging.stats import (
    mcnemar_worse_pvalue,
    paired_bootstrap_ci,
    paired_perplexity_ci,
    perplexity_change,
    sign_test_worse_pvalue,
)

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"


@dataclass(frozen=True)
class Verdict:
    gate: str
    status: str
    measured: str  # human-readable measured value
    threshold: str  # human-readable threshold
    reason: str
    numbers: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """PASS, or nothing to judge (NO_CASES): only these let promotion go ahead."""
        return self.status in (PASS, NO_CASES)

    def to_dict(self) -> dict:
        return asdict(self)


def judge_accuracy(candidate_correct: np.ndarray, production_correct: np.ndarray | None, policy: AccuracyPolicy) -> Verdict:
    """INT8 accuracy against production's, paired on the same examples, and against the floor."""
    cand = np.asarray(candidate_correct, bool)
    acc = float(cand.mean())
    numbers: dict = {"candidate_accuracy": acc, "absolute_floor": policy.absolute_floor, "examples": int(len(cand))}
    floor_ok = acc >= policy.absolute_floor
    if production_correct is None:
        status = PASS if floor_ok else FAIL
        reason = (
            "first candidate, no production model: judged against the absolute floor only; "
            f"accuracy {acc:.2%} {'>=' if floor_ok else '<'} floor {policy.absolute_floor:.2%}"
        )
        return Verdict("accuracy", status, f"{acc:.2%}", f">= {policy.absolute_floor:.2%} (floor only)", reason, numbers)
    prod = np.asarray(production_correct, bool)
    if prod.shape != cand.shape:
        raise ValueError(f"paired accuracy needs the same examples: {cand.shape} vs {prod.shape}")
    diff_points = 100 * (acc - float(prod.mean()))
    lo, hi = paired_bootstrap_ci(cand, prod, policy.bootstrap_samples)
    p_worse = mcnemar_worse_pvalue(cand, prod)
    numbers |= {
        "production_accuracy": float(prod.mean()),
        "diff_points": diff_points,
        "ci_low_points": 100 * lo,
        "ci_high_points": 100 * hi,
        "p_worse": p_worse,
        "tolerance_points": policy.tolerance_points,
        "alpha": policy.alpha,
    }
    problems = []
    if not floor_ok:
        problems.append(f"accuracy {acc:.2%} is below the floor {policy.absolute_floor:.2%}")
    if diff_points < -policy.tolerance_points:
        problems.append(f"accuracy is {-diff_points:.2f} points below production, more than the {policy.tolerance_points} point tolerance")
    if p_worse < policy.alpha:
        problems.append(f"significantly worse than production (McNemar one-sided p={p_worse:.3g} < alpha {policy.alpha})")
    status = FAIL if problems else PASS
    reason = "; ".join(problems) or f"within {policy.tolerance_points} points of production and not significantly worse (p={p_worse:.3g})"
    measured = f"{acc:.2%} (Δ {diff_points:+.2f} pt, 95% CI [{100 * lo:+.2f}, {100 * hi:+.2f}], p_worse={p_worse:.3g})"
    return Verdict(
        "accuracy",
        status,
        measured,
        f"Δ >= -{policy.tolerance_points} pt, p >= {policy.alpha}, >= {policy.absolute_floor:.0%}",
        reason,
        numbers,
    )


def judge_fidelity(int8_pred: np.ndarray, fp32_pred: np.ndarray, policy: FidelityPolicy) -> Verdict:
    """Top-1 agreement of the INT8 model with its own FP32 export."""
    agreement = float(np.mean(np.asarray(int8_pred) == np.asarray(fp32_pred)))
    ok = agreement >= policy.min_top1_agreement
    reason = f"INT8 agrees with FP32 on {agreement:.2%} of the evaluation split ({'>=' if ok else '<'} {policy.min_top1_agreement:.2%})"
    return Verdict(
        "int8_fidelity",
        PASS if ok else FAIL,
        f"{agreement:.2%}",
        f">= {policy.min_top1_agreement:.2%}",
        reason,
        {"top1_agreement": agreement, "threshold": policy.min_top1_agreement},
    )


def judge_perplexity(candidate_nll: np.ndarray, production_nll: np.ndarray | None, tokens: np.ndarray, policy: PerplexityPolicy) -> Verdict:
    """A causal LM's perplexity on the evaluation replies, paired per reply with production's (mean NLL per reply, each
    weighted by its tokens), and against the ceiling."""
    cand, w = np.asarray(candidate_nll, np.float64), np.asarray(tokens, np.float64)
    if cand.shape != w.shape or not len(cand):
        raise ValueError(f"perplexity needs one mean NLL and one token count per reply: {cand.shape} vs {w.shape}")
    ppl = float(np.exp(np.sum(cand * w) / np.sum(w)))
    numbers: dict = {
        "candidate_perplexity": ppl,
        "max_perplexity": policy.max_perplexity,
        "replies": int(len(cand)),
        "tokens": int(w.sum()),
    }
    ceiling_ok = ppl <= policy.max_perplexity
    if production_nll is None:
        reason = (
            "first candidate, no production model: judged against the perplexity ceiling only; "
            f"perplexity {ppl:.3f} {'<=' if ceiling_ok else '>'} {policy.max_perplexity:g}"
        )
        return Verdict(
            "perplexity", PASS if ceiling_ok else FAIL, f"{ppl:.3f}", f"<= {policy.max_perplexity:g} (ceiling only)", reason, numbers
        )
    prod = np.asarray(production_nll, np.float64)
    if prod.shape != cand.shape:
        raise ValueError(f"paired perplexity needs the same replies: {cand.shape} vs {prod.shape}")
    change = perplexity_change(cand, prod, w)
    lo, hi = paired_perplexity_ci(cand, prod, w, policy.bootstrap_samples)
    p_worse = sign_test_worse_pvalue(cand, prod, policy.min_nll_difference)
    numbers |= {
        "production_perplexity": float(np.exp(np.sum(prod * w) / np.sum(w))),
        "relative_change": change,
        "ci_low": lo,
        "ci_high": hi,
        "p_worse": p_worse,
        "max_relative_increase": policy.max_relative_increase,
        "alpha": policy.alpha,
    }
    problems = []
    if not ceiling_ok:
        problems.append(f"perplexity {ppl:.3f} is above the ceiling {policy.max_perplexity:g}")
    if change > policy.max_relative_increase:
        problems.append(f"perplexity is {change:+.2%} against production's, more than the {policy.max_relative_increase:+.2%} allowed")
    # The sign test is a test of the median reply, so its effect size is the median reply's change, as Kayenta pairs a
    # significance test with an effect size: it blocks when the typical reply got worse by more than the tolerance, which
    # the pooled mean can hide (most replies worse, a few much better). A retrained seed is often worse on more replies
    # than better by a margin inside the tolerance, and on enough replies any such shift is significant: that alone is
    # what the tolerance allows.
    median_change = float(np.expm1(np.median(cand - prod)))
    numbers["median_reply_change"] = median_change
    significant = p_worse < policy.alpha
    if significant and median_change > policy.max_relative_increase:
        problems.append(
            f"worse than production on significantly more replies than better (sign test, one-sided p={p_worse:.3g} < alpha"
            f" {policy.alpha}), the median reply by {median_change:+.2%}, more than the {policy.max_relative_increase:+.2%} allowed"
        )
    if problems:
        reason = "; ".join(problems)
    elif significant:
        reason = (
            f"worse than production on significantly more replies than better (sign test, one-sided p={p_worse:.3g} < alpha"
            f" {policy.alpha}), but by {median_change:+.2%} on the median reply and {change:+.2%} over all, within the"
            f" {policy.max_relative_increase:+.2%} allowed"
        )
    else:
        reason = f"within {policy.max_relative_increase:+.2%} of production's perplexity and not significantly worse (p={p_worse:.3g})"
    measured = f"{ppl:.3f} (Δ {change:+.2%}, 95% CI [{lo:+.2%}, {hi:+.2%}], median reply Δ {median_change:+.2%}, p_worse={p_worse:.3g})"
    return Verdict(
        "perplexity",
        FAIL if problems else PASS,
        measured,
        f"Δ <= {policy.max_relative_increase:+.2%}, p >= {policy.alpha} or median reply Δ <= {policy.max_relative_increase:+.2%}, <="
        f" {policy.max_perplexity:g}",
        reason,
        numbers,
    )


def judge_token_fidelity(fidelity: dict, policy: TokenFidelityPolicy, served: str = "INT8") -> Verdict:
    """The served weights (INT8, or a variant named by served) + adapter against the FP32 twin + the same adapter, on the
    same teacher-forced evaluation positions."""
    top5, kl, change = fidelity["top1_in_top5"], fidelity["mean_kl"], fidelity["perplexity_change"]
    problems = []
    if not top5 >= policy.min_top1_in_top5:
        problems.append(f"{served}'s top-1 token is among FP32's top 5 on {top5:.2%} of positions, below {policy.min_top1_in_top5:.2%}")
    if not kl <= policy.max_mean_kl:
        problems.append(f"mean KL(FP32 || {served}) {kl:.3g} nats is above {policy.max_mean_kl:g}")
    if not change <= policy.max_perplexity_change:
        problems.append(f"{served} perplexity is {change:+.2%} against FP32's, more than {policy.max_perplexity_change:+.2%}")
    measured = f"top-1 in top-5 {top5:.2%}, KL {kl:.2e}, perplexity {change:+.2%}; top-1 agreement {fidelity['top1_agreement']:.2%}"
    return _verdict(
        "token_fidelity",
        problems,
        f"on {fidelity['positions']} positions: {measured}",
        measured,
        f"top-5 >= {policy.min_top1_in_top5:.2%}, KL <= {policy.max_mean_kl:g}, perplexity <= {policy.max_perplexity_change:+.2%}",
        {k: fidelity[k] for k in ("positions", "top1_agreement", "top1_in_top5", "mean_kl", "perplexity_change")},
    )


def judge_generation(report: dict, policy: GenerationPolicy) -> Verdict:
    """Greedy generations on the golden and probe prompts: finite logits, stopping at EOS, and no loops."""
    runs = report["generations"]
    if not runs:
        return _verdict("generation", ["nothing was generated: no golden or probe prompt to generate from"], "", "0 generations", ">= 1")
    stopped = sum(r["stopped_at_eos"] for r in runs) / len(runs)
    worst = max(runs, key=lambda r: r["repeated_ngram_share"])
    problems = []
    if bad := [r for r in runs if not r["finite"]]:
        problems.append(f"non-finite logits while generating from {len(bad)} prompt(s), e.g. {bad[0]['prompt'][:60]!r}")
    if stopped < policy.min_eos_share:
        never = next(r for r in runs if not r["stopped_at_eos"])
        problems.append(
            f"{stopped:.0%} of generations reach EOS within {policy.max_new_tokens} tokens (need {policy.min_eos_share:.0%}); "
            f"e.g. {never['prompt'][:60]!r} never stopped"
        )
    if worst["repeated_ngram_share"] > policy.max_repeated_ngram_share:
        problems.append(
            f"a generation repeats {worst['repeated_ngram_share']:.0%} of its {policy.ngram}-grams (at most"
            f" {policy.max_repeated_ngram_share:.0%}): {worst['completion'][:80]!r}"
        )
    measured = (
        f"{stopped:.0%} stop at EOS, worst repeated {policy.ngram}-gram share {worst['repeated_ngram_share']:.0%}, over {len(runs)} prompts"
    )
    return _verdict(
        "generation",
        problems,
        measured,
        measured,
        f"EOS >= {policy.min_eos_share:.0%} within {policy.max_new_tokens} tokens, repeats <= {policy.max_repeated_ngram_share:.0%}",
        {"generations": len(runs), "eos_share": stopped, "max_repeated_ngram_share": worst["repeated_ngram_share"]},
    )


def judge_golden_completions(cases: list[dict]) -> Verdict:
    """Every declared prompt's greedy completion contains (or equals) its expected answer, case-insensitively."""
    if not cases:
        return Verdict(
            "golden_prompts", NO_CASES, "no golden prompts declared", "all pass", "no golden prompts in the policy; nothing to check"
        )

    def ok(c: dict) -> bool:
        got, want = c["completion"].strip().lower(), c["expect"].strip().lower()
        return got == want if c["match"] == "equals" else want in got

    failed = [c for c in cases if not ok(c)]
    reason = (
        f"{len(failed)} golden prompt(s) missed, e.g. {failed[0]['prompt'][:60]!r} answered {failed[0]['completion'][:80]!r}, "
        f"which does not {'equal' if failed[0]['match'] == 'equals' else 'contain'} {failed[0]['expect']!r}"
        if failed
        else "all golden prompts answered as expected"
    )
    return Verdict(
        "golden_prompts",
        FAIL if failed else PASS,
        f"{len(cases) - len(failed)}/{len(cases)}",
        f"{len(cases)}/{len(cases)}",
        reason,
        {"cases": len(cases), "failed": len(failed)},
    )


def cost_per_unit(node_usd_per_hour: float, units_per_s: float, per: float) -> float:
    """USD per `per` units (tokens, requests) on one node doing units_per_s: node cost / (units/s x 3600) x per."""
    return node_usd_per_hour / (units_per_s * 3600) * per if units_per_s > 0 else float("inf")


def judge_cost(cost: dict, policy: CostPolicy) -> Verdict:
    """Cost per 1M tokens (unit "tokens") or per 1,000 requests (unit "requests") at the measured speed, against an absolute
    ceiling and production's cost times (1 + tolerance). Against production the paired speed ratio's CI decides: the
    candidate fails when even the CI's fastest end costs more than allowed. A speed that is not a number is not a cost."""
    unit, speed = cost["unit"], cost["candidate_units_per_s"]
    per, ceiling = (1e6, policy.max_usd_per_1m_tokens) if unit == "tokens" else (1e3, policy.max_usd_per_1k_requests)
    label = f"USD per {'1M tokens' if unit == 'tokens' else '1,000 requests'}"
    ratio = cost.get("speed_ratio")
    if not np.isfinite(speed) or (ratio is not None and not np.isfinite(ratio).all()):
        return Verdict(
            "cost",
            INCONCLUSIVE,
            "speed not measured",
            f"<= {ceiling:g} {label}",
            "inconclusive: the speed the cost is computed from is not a number; gate again",
            {},
        )
    cand = cost_per_unit(policy.node_usd_per_hour, speed, per)
    numbers: dict = {"candidate_usd": cand, "ceiling_usd": ceiling, "node_usd_per_hour": policy.node_usd_per_hour}
    problems = [f"{cand:.4g} {label} is above the ceiling {ceiling:g}"] if cand > ceiling else []
    threshold, measured = f"<= {ceiling:g}", f"{cand:.4g} {label} at ${policy.node_usd_per_hour:g}/node-hour"
    if ratio is not None:
        median, _, hi = ratio
        prod = cost_per_unit(policy.node_usd_per_hour, cost["production_units_per_s"], per)
        least, point = 1 / hi - 1, 1 / median - 1  # cost change at the CI's fastest end, and at the median ratio
        numbers |= {"production_usd": prod, "cost_change": point, "cost_change_at_best": least, "tolerance": policy.tolerance}
        threshold += f", <= production x {1 + policy.tolerance:g}"
        measured += (
            f" ({point:+.1%} vs production: production's own INT8 graph, sha256 {cost['same_graph_sha256'][:12]})"
            if cost.get("same_graph_sha256")
            else f" ({point:+.1%} vs production, {least:+.1%} at the speed CI's best)"
        )
        if least > policy.tolerance:
            problems.append(
                f"costs {point:+.1%} per unit against production (at least {least:+.1%} by the paired speed CI), more than the "
                f"{policy.tolerance:+.0%} allowed"
            )
    return _verdict("cost", problems, measured, measured, threshold, numbers)


def _input_drift(input_drift: dict[str, float], policy: DriftPolicy) -> tuple[list[str], float, bool]:
    """The descriptors at or over the numeric threshold, their share, and whether that share is drift: the one rule the
    drift gate and live monitoring both judge inputs by."""
    drifted = sorted(k for k, v in input_drift.items() if v >= policy.input_numeric_threshold)
    share = len(drifted) / max(1, len(input_drift))
    return drifted, share, share >= policy.input_drift_share


def _unmeasured_inputs(input_drift: dict[str, float]) -> list[str]:
    """Why the input drift was not measured: no descriptor, or a descriptor whose distance is not a number."""
    if not input_drift:
        return ["no text descriptor of the traffic was measured against the reference data"]
    nan = sorted(k for k, v in input_drift.items() if np.isnan(v))
    return [f"the input drift of {', '.join(nan)} is not a number"] if nan else []


def judge_drift(prediction_drift: float | None, input_drift: dict[str, float], policy: DriftPolicy) -> Verdict:
    """Prediction drift vs production on the same traffic, and input drift of traffic vs reference; what could not be
    measured (a NaN distance, no descriptor) is inconclusive and blocks, never a pass."""
    drifted, share, inputs_drifted = _input_drift(input_drift, policy)
    numbers = {
        "prediction_drift": prediction_drift,
        "input_drift": input_drift,
        "input_drifted_share": share,
        "prediction_threshold": policy.prediction_threshold,
        "input_threshold": policy.input_numeric_threshold,
    }
    problems, unmeasured = [], []
    if prediction_drift is not None and prediction_drift >= policy.prediction_threshold:
        problems.append(
            f"candidate predictions drift from production's on the same traffic (JS distance {prediction_drift:.3f} >="
            f" {policy.prediction_threshold})"
        )
    if prediction_drift is not None and np.isnan(prediction_drift):
        unmeasured.append(f"the prediction drift against production is {prediction_drift} (no label distribution to compare)")
    if inputs_drifted:
        problems.append(
            f"traffic has drifted from the reference data in {', '.join(drifted)} ({share:.0%} of descriptors); re-validate on current data"
            " before promoting"
        )
    unmeasured += _unmeasured_inputs(input_drift)
    pd_text = "n/a (no production)" if prediction_drift is None else f"{prediction_drift:.3f}"
    measured = f"pred JS {pd_text}; input drifted {share:.0%}"
    threshold = f"JS < {policy.prediction_threshold}, drifted < {policy.input_drift_share:.0%}"
    if unmeasured and not problems:
        return Verdict(
            "drift",
            INCONCLUSIVE,
            measured,
            threshold,
            f"inconclusive: {'; '.join(unmeasured)}; a drift that was not measured does not pass: check that the traffic "
            "and reference samples hold texts, then gate again",
            numbers,
        )
    reason = "; ".join(problems + unmeasured) or "no prediction or input drift above threshold" + (
        " (no production model: input drift only)" if prediction_drift is None else ""
    )
    return Verdict("drift", FAIL if problems else PASS, measured, threshold, reason, numbers)


def judge_live_drift(input_drift: dict[str, float] | None, policy: DriftPolicy, records: int) -> Verdict:
    """Input drift of production's live traffic window vs the reference data, by the drift gate's rule; a window of fewer
    than live_min_records texts is not enough traffic to judge (inconclusive, not a pass)."""
    threshold = f"drifted < {policy.input_drift_share:.0%} of descriptors, over >= {policy.live_min_records} texts"
    numbers: dict = {
        "records": records,
        "min_records": policy.live_min_records,
        "input_threshold": policy.input_numeric_threshold,
        "input_drift_share": policy.input_drift_share,
    }
    if records < policy.live_min_records:
        return Verdict(
            "live_drift",
            INCONCLUSIVE,
            f"{records} texts",
            threshold,
            f"not enough traffic to judge: {records} sampled texts in the window, fewer than drift.live_min_records"
            f" ({policy.live_min_records}); serve more requests or raise serving.sample_ratio",
            numbers,
        )
    if input_drift is None:
        raise ValueError(f"{records} texts are enough to judge live drift, but no input drift was measured on them")
    drifted, share, inputs_drifted = _input_drift(input_drift, policy)
    numbers |= {"input_drift": input_drift, "input_drifted_share": share, "drifted": drifted}
    measured = f"input drifted {share:.0%} over {records} texts"
    if (unmeasured := _unmeasured_inputs(input_drift)) and not inputs_drifted:
        return Verdict(
            "live_drift", INCONCLUSIVE, measured, threshold, f"not judged: {'; '.join(unmeasured)} over {records} texts", numbers
        )
    if inputs_drifted:
        reason = (
            f"live traffic has drifted from the reference data in {', '.join(drifted)} ({share:.0%} of descriptors): production was"
            " validated on data unlike what it now serves; re-validate it on a sample of current traffic"
        )
        return Verdict("live_drift", FAIL, measured, threshold, reason, numbers)
    return Verdict(
        "live_drift",
        PASS,
        measured,
        threshold,
        f"live traffic is like the reference data: {share:.0%} of descriptors drifted "
        f"(under {policy.input_drift_share:.0%}) over {records} texts",
        numbers,
    )


def judge_production_recheck(
    items_per_s: dict[str, list[float]], latency_b1_ms: list[float], recorded: dict[str, dict], policy: ThroughputPolicy
) -> Verdict:
    """Production's throughput and p99, timed again, against the figures its throughput gate recorded.

    items_per_s: per batch size ("1", "32"), the items/s of each trial; recorded: benchmark.json's "batches". A recorded
    figure from another time is not an interleaved pair, so the median of the trials is compared, with no CI to lean on:
    only a fall below min_ratio x the recorded median, or a p99 over the SLO, fails.
    """
    numbers: dict = {"min_ratio": policy.min_ratio, "p99_slo_ms": policy.p99_slo_ms}
    problems, measured = [], []
    for batch, trials in sorted(items_per_s.items(), key=lambda kv: int(kv[0])):
        before = (recorded.get(batch) or {}).get("candidate_items_per_s")
        if not before or not trials:
            raise ValueError(f"no recorded or no measured throughput at batch {batch}")
        now = float(np.median(trials))
        ratio = now / float(before)
        numbers |= {
            f"b{batch}_items_per_s": now,
            f"b{batch}_recorded_items_per_s": float(before),
            f"b{batch}_ratio": ratio,
            f"b{batch}_trials": len(trials),
        }
        measured.append(f"b{batch}: {now:.0f} items/s = {ratio:.2f}x recorded {float(before):.0f}")
        if ratio < policy.min_ratio:
            problems.append(
                f"batch {batch}: {now:.0f} items/s (median of {len(trials)} trials) is {ratio:.2f}x the {float(before):.0f} its gate"
                f" recorded, below {policy.min_ratio}; look for a slower node, a changed library or a busier machine"
            )
    p99 = float(np.percentile(latency_b1_ms, 99))
    recorded_p99 = (recorded.get("1") or {}).get("candidate_p99_ms")
    numbers |= {"p99_ms": p99, "recorded_p99_ms": recorded_p99}
    measured.append(f"p99 {p99:.1f} ms (recorded {recorded_p99:.1f} ms)" if recorded_p99 is not None else f"p99 {p99:.1f} ms")
    if p99 > policy.p99_slo_ms:
        problems.append(
            f"p99 latency at batch 1 is {p99:.1f} ms, over the {policy.p99_slo_ms} ms SLO"
            + (f" (its gate recorded {recorded_p99:.1f} ms)" if recorded_p99 is not None else "")
        )
    return _verdict(
        "production_recheck",
        problems,
        "throughput and p99 still meet the throughput gate's figures",
        "; ".join(measured),
        f">= {policy.min_ratio}x recorded, p99 <= {policy.p99_slo_ms} ms",
        numbers,
    )


def judge_throughput(
    ratio_median: float,
    ratio_lo: float,
    ratio_hi: float,
    p99_ms: float,
    has_production: bool,
    policy: ThroughputPolicy,
    same_graph_sha256: str | None = None,
    wall: tuple[float, float, float] | None = None,
) -> Verdict:
    """Median paired throughput ratio with its CI, plus the p99 latency SLO. same_graph_sha256: the candidate runs
    production's own INT8 bytes on the same inputs, so the ratio is 1 by construction and the timing is not judged.
    wall: the wall clock's (median, low, high) when the judged ratio is per CPU second (lib/inference/benchmark), shown
    beside it and not judged: beside a busy core it measures mostly the other process."""
    numbers = {
        "ratio_median": ratio_median,
        "ratio_ci_low": ratio_lo,
        "ratio_ci_high": ratio_hi,
        "p99_ms": p99_ms,
        "min_ratio": policy.min_ratio,
        "p99_slo_ms": policy.p99_slo_ms,
    }
    per = " per CPU second" if wall else ""
    if wall:
        numbers |= {"wall_ratio_median": wall[0], "wall_ratio_ci_low": wall[1], "wall_ratio_ci_high": wall[2]}
    slo_ok = p99_ms <= policy.p99_slo_ms
    if not has_production:
        status = PASS if slo_ok else FAIL
        return Verdict(
            "throughput",
            status,
            f"p99 {p99_ms:.1f} ms",
            f"p99 <= {policy.p99_slo_ms} ms (no production to compare)",
            f"first candidate: p99 {p99_ms:.1f} ms {'within' if slo_ok else 'over'} the {policy.p99_slo_ms} ms SLO",
            numbers,
        )
    if not slo_ok:
        status, reason = FAIL, f"p99 latency {p99_ms:.1f} ms exceeds the {policy.p99_slo_ms} ms SLO"
    elif same_graph_sha256:
        status, reason = (
            PASS,
            (
                f"production's own INT8 graph (sha256 {same_graph_sha256[:12]}) on the same inputs: the same work per item; "
                f"the timing ({ratio_median:.2f}x [{ratio_lo:.2f}, {ratio_hi:.2f}]) measured only the machine's noise and is not judged"
            ),
        )
    elif ratio_hi < policy.min_ratio:
        status, reason = (
            FAIL,
            f"throughput{per} is {ratio_median:.2f}x production's, CI [{ratio_lo:.2f}, {ratio_hi:.2f}] entirely below {policy.min_ratio}",
        )
    elif ratio_lo >= policy.min_ratio:
        status, reason = (
            PASS,
            f"throughput{per} {ratio_median:.2f}x production's, CI [{ratio_lo:.2f}, {ratio_hi:.2f}] above {policy.min_ratio}",
        )
    else:
        status = INCONCLUSIVE if policy.on_inconclusive == "block" else PASS
        reason = (
            f"inconclusive: median ratio{per} {ratio_median:.2f}, CI [{ratio_lo:.2f}, {ratio_hi:.2f}] straddles {policy.min_ratio} after"
            f" the maximum number of pairs; re-run on a quieter machine (policy on_inconclusive={policy.on_inconclusive})"
        )
    if same_graph_sha256:
        numbers["same_graph_sha256"] = same_graph_sha256
        return Verdict(
            "throughput",
            status,
            f"1x by hash ({same_graph_sha256[:12]}), p99 {p99_ms:.1f} ms",
            f"= production's graph, p99 <= {policy.p99_slo_ms} ms",
            reason,
            numbers,
        )
    shown = f" per CPU s (wall {wall[0]:.2f}x [{wall[1]:.2f}, {wall[2]:.2f}])" if wall else ""
    return Verdict(
        "throughput",
        status,
        f"{ratio_median:.2f}x [{ratio_lo:.2f}, {ratio_hi:.2f}]{shown}, p99 {p99_ms:.1f} ms",
        f">= {policy.min_ratio}x, p99 <= {policy.p99_slo_ms} ms",
        reason,
        numbers,
    )


_SEVERITY = {PASS: 0, NO_CASES: 0, INCONCLUSIVE: 1, FAIL: 2}


def _wall_ratio(summary: dict) -> tuple[float, float, float] | None:
    """The wall clock's ratio of a summary whose judged ratio is per CPU second; None for one timed on the wall clock only
    (recorded before the CPU clock was read), whose ratio_* are the wall clock's and are judged as such."""
    if summary.get("ratio_basis") != "cpu":
        return None
    return summary["wall_ratio_median"], summary["wall_ratio_ci_low"], summary["wall_ratio_ci_high"]


def judge_paired_speed(batches: dict[str, dict], has_production: bool, policy: ThroughputPolicy) -> Verdict:
    """Each batch size's paired throughput (a causal LM's: each concurrency's) with the first one's p99; the worse verdict counts."""
    p99 = batches[next(iter(batches))]["candidate_p99_ms"]
    verdicts = {
        b: judge_throughput(
            r["ratio_median"],
            r["ratio_ci_low"],
            r["ratio_ci_high"],
            p99,
            has_production,
            policy,
            r.get("same_graph_sha256"),
            _wall_ratio(r),
        )
        for b, r in batches.items()
    }
    worst = max(verdicts.values(), key=lambda v: _SEVERITY[v.status])
    return Verdict(
        "throughput",
        worst.status,
        "; ".join(f"b{b}: {v.measured}" for b, v in verdicts.items()),
        worst.threshold,
        "; ".join(f"batch {b}: {v.reason}" for b, v in verdicts.items()),
        {f"b{b}_{k}": x for b, v in verdicts.items() for k, x in v.numbers.items()},
    )


def _graph_problems(graph: dict | None) -> tuple[list[str], list[str]]:
    """(fails, unmeasured) of the served graph: the base build's INT8 files as hashed now, as the build recorded them, as
    quantized_model judged the adapter on them, and as the build was timed."""
    if not graph or not graph.get("sha256"):
        return [], ["the base build's INT8 files were not hashed"]
    now, differ, unmeasured = graph["sha256"], [], []
    for key, what in (
        ("recorded_sha256", "recorded when the build was made"),
        ("gated_sha256", "quantized_model judged this adapter on"),
        ("timed_sha256", "the build's timing was measured on"),
    ):
        if not graph.get(key):
            unmeasured.append(
                f"no hash of the INT8 files {what}"
                + (f"; delete {graph['base_build']} from the base builds' cache to rebuild it" if key == "recorded_sha256" else "")
            )
        elif graph[key] != now:
            differ.append(f"the {graph[key][:12]} {what}")
    fails = (
        [
            f"the base build {graph['base_build']}'s INT8 files hash to {now[:12]}, not {' nor '.join(differ)}: this adapter would not be "
            "served on the graph that was judged; re-gate it on a fresh build"
        ]
        if differ
        else []
    )
    return fails, unmeasured


def _scan_problems(scan: dict | None, policy: ThroughputPolicy) -> tuple[list[str], list[str]]:
    if not scan:
        return [], ["the adapter's served values were not scanned"]

    def where(kind: str) -> str:
        worst = max(scan["per_tensor"].items(), key=lambda kv: kv[1][kind])
        return f"{worst[1][kind]} in {worst[0]}"

    fails = []
    if scan["nan"] or scan["inf"]:
        kind = "nan" if scan["nan"] else "inf"
        fails.append(f"{scan['nan']} NaN and {scan['inf']} Inf among the adapter's {scan['values']} served values (e.g. {where(kind)})")
    share = scan["subnormal"] / max(1, scan["values"])
    if share > policy.max_subnormal_share:
        fails.append(
            f"{scan['subnormal']} of the adapter's {scan['values']} served values are subnormal ({share:.3%}, at most"
            f" {policy.max_subnormal_share:.3%}; e.g. {where('subnormal')}): a CPU computes with them on a slow path, on the same graph"
        )
    return fails, []


def judge_shared_graph_speed(report: dict, policy: ThroughputPolicy) -> Verdict:
    """A causal-LM adapter's speed, which its base build decides: every adapter of a base runs the build's graph, so there is
    no per-adapter timing. It passes when the served graph is the build's (by hash), the adapter's served values hold no NaN,
    Inf or more subnormal floats than allowed, and the build's own timing meets the TTFT SLO (and on another build than
    production's, the paired ratio against production's build). policy.p99_slo_ms is the TTFT SLO. What was not measured blocks."""
    graph, scan, timing = report.get("served_graph"), report.get("adapter_scan"), report.get("build_timing")
    fails, unmeasured = _graph_problems(graph)
    f, u = _scan_problems(scan, policy)
    fails, unmeasured = fails + f, unmeasured + u
    batches = (timing or {}).get("batches") or {}
    against = (timing or {}).get("against")
    numbers: dict = {
        "subnormal_values": (scan or {}).get("subnormal"),
        "nonfinite_values": (scan or {}).get("nan", 0) + (scan or {}).get("inf", 0) if scan else None,
        "max_subnormal_share": policy.max_subnormal_share,
        "p99_slo_ms": policy.p99_slo_ms,
    }
    paired = None
    if not batches:
        unmeasured.append("the base build has no timing")
    elif against:
        paired = judge_paired_speed(batches, True, policy)
        numbers |= paired.numbers
        (fails if paired.status == FAIL else unmeasured if paired.status == INCONCLUSIVE else []).append(
            f"against production's build {against}: {paired.reason}"
        )
    else:
        p99 = batches[next(iter(batches))]["candidate_p99_ms"]
        numbers |= {"ttft_p99_ms": p99} | {f"c{c}_tokens_per_s": r["candidate_items_per_s"] for c, r in batches.items()}
        if not np.isfinite(p99):
            unmeasured.append("the base build's TTFT p99 is not a number")
        elif p99 > policy.p99_slo_ms:
            fails.append(f"the base build's TTFT p99 is {p99:.1f} ms, over the {policy.p99_slo_ms:g} ms SLO")
    sha = (graph or {}).get("sha256") or "?"
    speeds = ", ".join(f"c{c} {r['candidate_items_per_s']:.1f} tokens/s" for c, r in batches.items())
    scanned = (
        f"{scan['subnormal']} subnormal, {scan['nan']} NaN, {scan['inf']} Inf of {scan['values']} values" if scan else "values not scanned"
    )
    timed = f"{speeds}, TTFT p99 {batches[next(iter(batches))]['candidate_p99_ms']:.1f} ms" if batches else "no timing"
    measured = f"graph {sha[:12]}; {scanned}; build {timed}" + (f"; vs production's build: {paired.measured}" if paired else "")
    threshold = (
        f"graph = the build's, subnormal share <= {policy.max_subnormal_share:g}, no NaN/Inf, TTFT p99 <= {policy.p99_slo_ms:g} ms"
        + (f", >= {policy.min_ratio}x production's build" if against else "")
    )
    if fails:
        return Verdict("throughput", FAIL, measured, threshold, "; ".join(fails), numbers)
    if unmeasured:
        return Verdict("throughput", INCONCLUSIVE, measured, threshold, "inconclusive: " + "; ".join(unmeasured) + "; gate again", numbers)
    where = f"against production's build {against}: {paired.reason}" if against else "production, if any, runs on the same build"
    reason = (
        f"no per-adapter timing: every adapter of this base runs the base build's graph ({graph['base_build']}, INT8 files sha256"
        f" {sha[:12]}, as recorded when it was built), whose LoRA slots fix the rank and targets, so an adapter changes values, never the"
        f" work per token; its served values: {scanned}; the build's own timing"
        f" ({'measured now' if timing.get('measured_now') else 'measured ' + str(timing.get('measured_at'))}): {timed}; {where}"
    )
    return Verdict("throughput", PASS, measured, threshold, reason, numbers)


def judge_answer_cost(cost: dict, policy: CostPolicy) -> Verdict:
    """A causal LM's cost per answer: its mean generated tokens per answer on the traffic prompts x the base build's cost per
    token, under the per-token and per-answer ceilings, and against production's answers to the same prompts (on another
    build, at the fast end of the paired speed CI). An adapter whose answers run longer costs more per request on the same graph."""
    speed, tokens, prod_tokens = cost.get("tokens_per_s"), cost.get("answer_tokens") or [], cost.get("production_answer_tokens")
    ceiling = f"<= {policy.max_usd_per_1m_tokens:g} USD per 1M tokens, <= {policy.max_usd_per_1k_answers:g} USD per 1,000 answers"
    missing = []
    if speed is None or not np.isfinite(speed) or speed <= 0:
        missing.append("the base build's tokens/s is not measured")
    if not tokens:
        missing.append("the candidate's answers to the traffic prompts were not found in its drift report (re-run drift_report)")
    if cost.get("production") and (not prod_tokens or len(prod_tokens) != len(tokens)):
        missing.append(f"production {cost['production']}'s answers to the same traffic prompts were not found")
    ratio = cost.get("speed_ratio")
    if ratio is not None and not np.isfinite(ratio).all():
        missing.append("the paired speed ratio against production's build is not a number")
    if missing:
        return Verdict("cost", INCONCLUSIVE, "not measured", ceiling, "inconclusive: " + "; ".join(missing) + "; gate again", {})
    per_token = cost_per_unit(policy.node_usd_per_hour, speed, 1.0)
    mean = float(np.mean(tokens))
    per_1m, per_1k = per_token * 1e6, per_token * mean * 1e3
    numbers: dict = {
        "usd_per_1m_tokens": per_1m,
        "tokens_per_answer": mean,
        "usd_per_1k_answers": per_1k,
        "answers": len(tokens),
        "cut_at_max_new_tokens": cost.get("cut_at_cap", 0),
        "node_usd_per_hour": policy.node_usd_per_hour,
        "ceiling_usd_per_1m_tokens": policy.max_usd_per_1m_tokens,
        "ceiling_usd_per_1k_answers": policy.max_usd_per_1k_answers,
    }
    problems = []
    if per_1m > policy.max_usd_per_1m_tokens:
        problems.append(f"{per_1m:.4g} USD per 1M tokens is above the ceiling {policy.max_usd_per_1m_tokens:g}")
    if per_1k > policy.max_usd_per_1k_answers:
        problems.append(
            f"{per_1k:.4g} USD per 1,000 answers ({mean:.1f} tokens each) is above the ceiling {policy.max_usd_per_1k_answers:g}"
        )
    measured = (
        f"{per_1k:.4g} USD per 1,000 answers: {mean:.1f} tokens each x {per_1m:.4g} USD per 1M tokens at"
        f" ${policy.node_usd_per_hour:g}/node-hour"
    )
    if prod_tokens is not None:
        prod_mean = float(np.mean(prod_tokens))
        length = mean / prod_mean if prod_mean > 0 else float("inf")
        median, hi = (ratio[0], ratio[2]) if ratio is not None else (1.0, 1.0)  # the same build: the same cost per token
        point, least = length / median - 1, length / hi - 1
        numbers |= {
            "production_tokens_per_answer": prod_mean,
            "answer_length_ratio": length,
            "cost_change": point,
            "cost_change_at_best": least,
            "tolerance": policy.tolerance,
        }
        ceiling += f", <= production x {1 + policy.tolerance:g} per answer"
        speed_note = f", and its build's speed {median:.2f}x production's" if ratio is not None else " on the same build"
        measured += f" ({point:+.1%} per answer vs production: {mean:.1f} tokens against {prod_mean:.1f}{speed_note})"
        if least > policy.tolerance:
            problems.append(
                f"an answer costs {point:+.1%} against production's"
                + (f" (at least {least:+.1%} by the paired speed CI)" if ratio is not None else "")
                + f": its answers to the same {len(tokens)} traffic prompts run {mean:.1f} tokens on average against {prod_mean:.1f}, "
                f"more than the {policy.tolerance:+.0%} allowed"
            )
    return _verdict("cost", problems, measured, measured, ceiling, numbers)


def judge_golden(predicted: list[str], expected: list[str], texts: list[str]) -> Verdict:
    """Every golden inference test from the policy predicts its expected label."""
    misses = [(t, e, p) for t, e, p in zip(texts, expected, predicted) if e != p]
    n = len(expected)
    reason = (
        "no golden cases declared"
        if n == 0
        else (
            f"all {n} golden cases predicted correctly"
            if not misses
            else "; ".join(f"{t!r}: expected {e}, got {p}" for t, e, p in misses[:3])
            + (f" (+{len(misses) - 3} more)" if len(misses) > 3 else "")
        )
    )
    status = NO_CASES if n == 0 else FAIL if misses else PASS
    return Verdict("golden", status, f"{n - len(misses)}/{n} correct", "all", reason, {"cases": n, "misses": len(misses)})


def judge_safety(findings: list[str]) -> Verdict:
    """No file in the artifact (or its base) could run code, escape its folder, or is malformed."""
    reason = (
        "no pickles, code, bad safetensors, escaping links or oversized files"
        if not findings
        else "; ".join(findings[:3]) + (f" (+{len(findings) - 3} more)" if len(findings) > 3 else "")
    )
    return Verdict(
        "artifact_safety", FAIL if findings else PASS, f"{len(findings)} finding(s)", "0 findings", reason, {"findings": len(findings)}
    )


def _verdict(gate: str, problems: list[str], ok: str, measured: str, threshold: str, numbers: dict | None = None) -> Verdict:
    return Verdict(gate, FAIL if problems else PASS, measured, threshold, "; ".join(problems) or ok, numbers or {})


def judge_weights_finite(report: dict) -> Verdict:
    """No NaN or Inf in any weight tensor of the adapter or the merged model."""
    bad = [f"{file}: {', '.join(names[:3])}" for file, names in report["nonfinite_tensors"].items() if names]
    outliers = report.get("weight_norm_outliers") or {}
    note = f"; weight-norm outliers vs base (reported): {', '.join(list(outliers)[:3])}" if outliers else ""
    return _verdict(
        "weights_finite",
        [f"NaN/Inf in {b}" for b in bad],
        "every weight tensor is finite" + note,
        f"{sum(len(v) for v in report['nonfinite_tensors'].values())} non-finite tensors",
        "0",
        {"norm_outliers": len(outliers)},
    )


def judge_weight_scale(report: dict, policy: HealthPolicy, has_production: bool | None = None) -> Verdict:
    """Every weight matrix within max_weight_scale_ratio of production's norm, up or down (a head blown up x100 keeps its labels);
    with a production, no matrix compared is inconclusive (blocks), never a pass. has_production None: as the report says."""
    ratios = report.get("weight_scale_vs_production")
    if has_production is None:
        has_production = ratios is not None
    k = policy.max_weight_scale_ratio
    if not has_production and ratios is None:
        return Verdict(
            "weight_scale",
            PASS,
            "no production to compare",
            f"within {k:g}x of production",
            "first candidate, no production model: weight scale not compared",
            {},
        )
    if not ratios:
        why = "was not measured" if ratios is None else "found no weight matrix of the same name and shape in both models"
        return Verdict(
            "weight_scale",
            INCONCLUSIVE,
            "0 matrices compared",
            f"within {k:g}x of production",
            f"inconclusive: a production model exists but the weight-scale comparison {why}; nothing was compared, so nothing "
            "may pass: re-materialize merged_model, or check that the candidate has production's architecture",
            {"matrices": 0},
        )
    # A NaN ratio is out of range too: what cannot be compared does not pass.
    bad = {n: r for n, r in ratios.items() if not (1 / k <= r <= k)}
    worst = max(ratios.values(), key=lambda r: abs(np.log(r)) if r > 0 and np.isfinite(r) else np.inf, default=1.0)
    problems = [
        f"{n} is {r:.3g}x production's norm" if np.isfinite(r) else f"{n} has a non-finite norm, not comparable"
        for n, r in sorted(bad.items(), key=lambda kv: kv[0])[:3]
    ] + ([f"(+{len(bad) - 3} more)"] if len(bad) > 3 else [])
    return _verdict(
        "weight_scale",
        problems,
        f"every weight matrix within {k:g}x of production's norm",
        f"{worst:.3g}x at the extreme",
        f"within {k:g}x of production",
        {"matrices": len(ratios), "out_of_range": len(bad)},
    )


def judge_loads_cleanly(report: dict) -> Verdict:
    """The merged model loads with no missing, unexpected or mismatched keys, and no head is silently re-initialized."""
    info = report["merged_loading"]
    problems = [f"{k.replace('_', ' ')}: {', '.join(v[:3])}" for k, v in info.items() if v]
    head = (report.get("adapter") or {}).get("head_not_provided") or []
    if head:
        problems.append(f"the base lacks {', '.join(head)} and the adapter does not provide it: the head would be randomly initialized")
    return _verdict("loads_cleanly", problems, "no missing, unexpected or mismatched keys", f"{len(problems)} problem(s)", "0")


def judge_adapter_fits_base(report: dict) -> Verdict:
    """The adapter declares the registered base, its LoRA shapes and rank fit, and it matches at least one module."""
    fit = report.get("adapter")
    if fit is None:
        return _verdict("adapter_fits_base", [], "full model: no adapter to fit", "n/a", "n/a")
    problems = list(fit["shape_problems"][:3])
    if fit["declared_base"] and fit["declared_base"] != fit["registered_base"]:
        problems.append(
            f"adapter_config.json declares base {fit['declared_base']!r} but it is registered against {fit['registered_base']!r}"
        )
    if fit["modules_matched"] == 0:
        problems.append("the adapter matches no module of the base; it would change nothing")
    return _verdict(
        "adapter_fits_base",
        problems,
        f"rank {fit['rank']}, {fit['modules_matched']} base modules matched",
        f"{fit['modules_matched']} modules, rank {fit['rank']}",
        ">= 1 module, shapes fit",
        {"modules_matched": fit["modules_matched"]},
    )


def judge_adapter_changes_outputs(report: dict, min_change: float = 1e-5) -> Verdict:
    """Merged outputs differ from the base's on the probe batch."""
    fit = report.get("adapter")
    if fit is None:
        return _verdict("adapter_changes_outputs", [], "full model: no base to compare", "n/a", "n/a")
    change = fit["max_output_change"]
    problems = [] if change > min_change else [f"merged outputs equal the base's on the probe batch (max |Δlogit| {change:.1e})"]
    return _verdict(
        "adapter_changes_outputs",
        problems,
        f"max |Δlogit| vs base {change:.3g}",
        f"{change:.3g}",
        f"> {min_change}",
        {"max_output_change": change},
    )


def judge_tokenizer(report: dict) -> Verdict:
    """The vocabulary fits the embedding table, and probe token ids match the reference unless a change was declared."""
    t = report["tokenizer"]
    problems = []
    if t["vocab_size"] > t["embedding_rows"]:
        problems.append(f"tokenizer has {t['vocab_size']} tokens but the embedding table only {t['embedding_rows']} rows")
    mismatches = t.get("probe_id_mismatches") or []
    if mismatches and not t["change_declared"]:
        problems.append(
            f"token ids differ from the reference tokenizer on {len(mismatches)} probe string(s), e.g. {mismatches[0]!r}; register with"
            " --tokenizer-change if intended"
        )
    return _verdict(
        "tokenizer",
        problems,
        f"vocab {t['vocab_size']} <= {t['embedding_rows']} rows; probe ids " + ("differ (declared change)" if mismatches else "match"),
        f"{t['vocab_size']} tokens / {t['embedding_rows']} rows",
        "vocab <= rows, same ids",
    )


def judge_probe(report: dict) -> Verdict:
    """Probe outputs are finite and identical on a repeated call."""
    if "forward_error" in report:
        return _verdict("probe", [f"the probe batch does not run: {report['forward_error'][:200]}"], "", "error", "finite, deterministic")
    problems = ([] if report["probe_finite"] else ["probe outputs contain NaN or Inf"]) + (
        [] if report["probe_deterministic"] else ["the same input twice gave different outputs"]
    )
    return _verdict("probe", problems, "finite and deterministic", "finite, deterministic" if not problems else "; ".join(problems), "both")


def judge_gradients(report: dict) -> Verdict:
    """A synthetic-batch backward pass gives a finite loss and finite gradients."""
    g = report["gradients"]
    if "error" in g:
        return _verdict("gradients", [f"no backward pass: {g['error'][:200]}"], "", "error", "0")
    problems = ([] if g["loss_finite"] else ["loss is NaN or Inf"]) + (
        [f"non-finite gradients in {', '.join(g['nonfinite'][:3])}"] if g["nonfinite"] else []
    )
    return _verdict("gradients", problems, "finite loss and gradients", f"{len(g['nonfinite'])} non-finite", "0")


def judge_semver(report: dict) -> Verdict:
    """The declared SemVer bump covers what the I/O contract change requires."""
    from modelcd_assets.lib.judging.contract import LEVELS

    changes = "; ".join(f"{c['level'].upper()}: {c['what']}" for c in report["changes"]) or "no contract change (weights only)"
    if report["production_semver"] is None:
        return _verdict("semver", [], f"first version {report['semver']}; contract recorded", report["semver"], "n/a (first version)")
    declared, required = report["declared_level"], report["required_level"]
    problems = []
    if declared is None:
        problems.append(f"declared {report['declared']} is not greater than production's {report['production_semver']}")
    elif LEVELS.index(declared) < LEVELS.index(required):
        problems.append(
            f"declared a {declared} bump ({report['production_semver']} -> {report['semver']}) but the contract change needs {required}:"
            f" {changes}; register with --bump {required}"
        )
    return _verdict(
        "semver",
        problems,
        f"{report['production_semver']} -> {report['semver']} ({declared}) covers {required}: {changes}",
        f"declared {declared}",
        f">= {required}",
        {"changes": len(report["changes"])},
    )
