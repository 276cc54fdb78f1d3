"""Render the docs' measured tables from bench/results/*.json, so every figure in docs/ is one a script printed.

    python bench/render_docs.py          (make docs)
Each table sits between `<!-- render:NAME -->` and `<!-- /render:NAME -->` in a docs file and is replaced whole.
A block whose results file is missing says which command writes it; nothing is typed by hand.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def _machine(m: dict) -> str:
    flags = f" ({', '.join(m['int8_flags'])})" if m.get("int8_flags") else ""
    return f"{m['cpu']}{flags}, {m['cores']} cores"


def int8(d: dict) -> str:
    rows = "\n".join(
        f"| {r['runtime']} | {r['feeding']} | {r['items_per_s']:.0f} | {r['ratio_vs_eager_one_at_a_time']:.2f}× | "
        f"{r['accuracy']:.2%} | {r['accuracy_vs_ort_fp32']:.4f} | {r['top1_agreement_vs_ort_fp32']:.2%} |"
        for r in d["rows"]
    )
    dependence = "; ".join(f"{k} {v:.3g}" for k, v in d["batch_dependence_max_abs_logit_diff"].items())
    return (
        f"Measured on {_machine(d['machine'])}; {d['texts']} evaluation texts (median {d['median_tokens']:.0f} tokens, max"
        f" {d['max_tokens']}), median of {d['rounds']} interleaved rounds; accuracy on all {d['evaluation_texts']} evaluation texts.\n\n|"
        " runtime | inputs | items/s | vs eager, one at a time | accuracy | accuracy / ORT FP32 | top-1 agreement with ORT FP32"
        " |\n|---|---|---|---|---|---|---|\n"
        + rows
        + f"\n\nLargest logit difference of a text run alone against the same text in a length bucket of {d['bucket']}: {dependence}."
    )


def serving(d: dict) -> str:
    med = d["medians"]
    rows = "\n".join(
        f"| {c} | {med['modelcd'][c]['requests_per_s']:.1f} | {med['baseline'][c]['requests_per_s']:.1f} |"
        f" **{d['throughput_ratio_vs_baseline'][c]:.2f}×** | {med['modelcd'][c]['p50_ms']:.1f} / {med['modelcd'][c]['p99_ms']:.1f} |"
        f" {med['baseline'][c]['p50_ms']:.1f} / {med['baseline'][c]['p99_ms']:.1f} | **{d['p99_ratio_vs_baseline'][c]:.2f}** |"
        for c in ("1", "8", "32")
    )
    t = d["targets"]
    s = d["swaps"]
    return (
        f"Measured on {_machine(d['machine'])}; {d['model']} ({d['variant']} INT8, artifact sha256 {d['artifact_sha256'][:12]}); one"
        f" evaluation text per request, closed loop, median of {d['rounds_per_concurrency']} rounds of {d['seconds_per_phase']:g} s per"
        f" server and concurrency; the two servers agree on {d['top1_agreement_modelcd_vs_baseline']:.2%} of top-1 labels.\n\n| concurrency"
        " | modelcd req/s | baseline req/s | throughput ratio | modelcd p50 / p99 ms | baseline p50 / p99 ms | p99 ratio"
        " |\n|---|---|---|---|---|---|---|\n"
        + rows
        + f"\n\nTargets: throughput ratio ≥ {t['throughput_ratio']['1']:g}× at concurrency 1 and ≥ {t['throughput_ratio']['32']:g}× at 32;"
        f" p99 ratio ≤ {t['p99_ratio']:g}.\n\n| swaps under load (concurrency 8) | result | target |\n|---|---|---|\n| requests failed |"
        f" {s['failed_requests']} of {s['requests']} ({s['swaps']} swaps) | 0 |\n| p99 swapping once a second / steady p99 |"
        f" {s['swapping_p99_ms']:.1f} / {s['steady_p99_ms']:.1f} ms = **{s['swap_p99_ratio']:.2f}** | ≤ {t['swap_p99_ratio']:g} |\n| swap"
        f" time / restart to ready | {s['swap_seconds_median'] * 1000:.0f} ms / {s['restart_to_ready_seconds_median']:.2f} s ="
        f" **{s['swap_vs_restart']:.3f}** | ≤ {t['swap_vs_restart']:g} |"
        + _swap_steps(s)
        + "\n\n| versions loaded | resident MB | MB per version |\n|---|---|---|\n"
        + "\n".join(
            f"| {n} | {d['memory']['rss_mb'][n]:.0f} | {d['memory']['mb_per_version'][n]:.1f} |" for n in d["memory"]["mb_per_version"]
        )
        + f"\n\nEach further version adds {d['memory']['marginal_mb_per_version']:.1f} MB (one ONNX Runtime session over its INT8"
        " artifact)."
    )


def _swap_steps(s: dict) -> str:
    steps = s.get("swap_step_seconds_median")
    if not steps:
        return ""
    return (
        "\n\nA swap, step by step (median ms, from the admin API's load report): "
        + "; ".join(f"{k} {1000 * v:.0f}" for k, v in steps.items())
        + "."
    )


def calibration(d: dict) -> str:
    rows = "\n".join(
        f"| {r['calibration']} | {r['texts']} | {r['top1_agreement']:.2%} | {r['max_abs_logit_diff']:.3f} |" for r in d["results"]
    )
    return (
        f"{d['model']}, {d['evaluation_texts']} evaluation texts, on {_machine(d)}.\n\n"
        "| calibration split | texts | top-1 agreement with FP32 | max abs logit difference |\n|---|---|---|---|\n" + rows
    )


def recalibration(d: dict) -> str:
    names = {"tiny": "tiny test model (2 layers, hidden 32)", "minilm": "all-MiniLM-L6-v2 + the demo's good adapter"}
    gates = ("int8_agrees_with_fp32", "accuracy_within_tolerance", "throughput_within_tolerance")
    rows = []
    for model, m in d["models"].items():
        p = m["production"]
        rows.append(
            f"| {names.get(model, model)} | production {p['version']}: the data folder's split | {p['examples']} | {p['median_tokens']:g} |"
            f" {p['static_top1_agreement']:.2%} | | | | | |"
        )
        for name, s in m["sets"].items():
            g = [
                (
                    f"{s['gates'][k]['status']} ({s['gates'][k]['measured']})"
                    if s["gates"].get(k, {}).get("measured")
                    else s["gates"].get(k, {}).get("status", "not run")
                )
                for k in gates
            ]
            rows.append(
                f"| | {name}: revision {s['revision']} | {s['examples']} | {s['median_tokens']:g} / {s['evaluation_median_tokens']:g} |"
                f" {s['static_top1_agreement']:.2%} | {' | '.join(g)} | **{s['outcome']}** (production now {s['production_after']}) |"
                f" {s['seconds_to_verdict']:.0f} |"
            )
    return (
        f'On {_machine(d["machine"])}; policy pinned to static INT8, fidelity floor 99% top-1 agreement. A gate "not run" sits below a'
        " blocking gate that failed.\n\n| model | calibration set | texts | median tokens / evaluation's | static INT8 agreement with FP32"
        " | fidelity gate | accuracy gate (vs production) | throughput gate | outcome | calibrate → verdict s"
        " |\n|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows)
    )


def faults(d: dict) -> str:
    ok = sum(c["ok"] for c in d["classes"])
    apart = [c for c in d["classes"] if c.get("not_reproducible")]  # neither caught nor missed: the fault does not occur on this model
    cell = lambda x: str(x).replace("|", "\\|")  # noqa: E731
    verdict = lambda c: "yes" if c["ok"] else "not reproducible" if c.get("not_reproducible") else "**NO**"  # noqa: E731
    rows = "\n".join(f"| {c['name']} | {c['group']} | {cell(c['expected'])} | {cell(c['actual'])} | {verdict(c)} |" for c in d["classes"])
    under_load = sum(c["under_load"] for c in d["control_results"])
    measured = "".join(f"\n\nNot reproducible on this model, counted apart: {c['name']}: {cell(c['detail'])}." for c in apart)
    return (
        f"**{ok} of {len(d['classes']) - len(apart)} classes ended in their expected"
        f" outcome{f', {len(apart)} not reproducible on this model' if apart else ''}; {d['false_blocks']} of {d['controls']} clean"
        f" controls were blocked** (95% upper bound {d['false_block_upper_95']:.1%}; "
        + (
            f"{under_load} gated beside a server that answered {d['load']['requests']:,} requests with {d['load']['errors']} failures"
            if d["load"]
            else "none gated beside a server under load"
        )
        + f"); production before and after: {d['production']} → {d['user_production_after']}.\n\n"
        "| class | group | expected | actual | ok |\n|---|---|---|---|---|\n"
        + rows
        + measured
        + "\n\n| clean control | kind | beside the server under load | outcome | s |\n|---|---|---|---|---|\n"
        + "\n".join(
            f"| {c['label']} | {cell(c['kind'])} | {'yes' if c['under_load'] else 'no'} | "
            f"{cell(c['outcome']) if not c['blocked'] else '**' + cell(c['detail']) + '**'} | {c['seconds']:.0f} |"
            for c in d["control_results"]
        )
    )


def lm_seeds(d: dict) -> str:
    pct = lambda x: f"{x:+.2%}"  # noqa: E731
    tol = d["policy"]["max_relative_increase"]
    rows = "\n".join(
        f"| {label} | {pct(r['relative_change'])} [{pct(r['ci'][0])}, {pct(r['ci'][1])}] | {pct(r['median_reply_change'])} | "
        f"{r['p_worse']:.3g} | {r['status']} |"
        for label, r in d["rows"].items()
        if label not in ("seed 0",)
    )
    m = d["summary"]["median_reply_change"]
    sweep = " · ".join(
        f"{float(t):+.0%}: {v['retrained_passed']}/{len(d['retrained_seeds'])} seeds pass, worse {v['worse']}"
        for t, v in d["tolerance_sweep"].items()
    )
    shown = lambda x: x if isinstance(x, str) else f"{x:.4g}"  # noqa: E731
    targets = "\n".join(f"| {t['target']} | {shown(t['measured'])} | {'yes' if t['met'] else '**no**'} |" for t in d["targets"].values())
    return (
        f"On {_machine(d['machine'])}; {d['evaluation_replies']} evaluation replies ({d['tokens']} tokens), production (seed 0) perplexity"
        f" {d['production_perplexity']:.4f}, judged under the demo's policy (max_relative_increase {pct(tol)}, alpha"
        f" {d['policy']['alpha']}). The median reply's change over the {len(d['retrained_seeds'])} retrained seeds: {pct(m['min'])} to"
        f" {pct(m['max'])}, mean {pct(m['mean'])}, sd {m['std']:.2%}.\n\n| adapter | perplexity change [95% CI] | median reply change |"
        " sign test p | verdict |\n|---|---|---|---|---|\n"
        + rows
        + f"\n\nThe same replies judged at other tolerances: {sweep}.\n\n| target | measured | met |\n|---|---|---|\n"
        + targets
    )


def false_block(d: dict) -> str:
    runs = d["runs"]
    gates = sorted({g["gate"] for r in runs for g in r["gates"]})
    rows = []
    for gate in gates:
        values = [next((g for g in r["gates"] if g["gate"] == gate), None) for r in runs]
        passed = sum(v is not None and v["status"] == "pass" for v in values)
        shown = sorted({v["measured"] for v in values if v is not None and v["measured"]})
        measured = shown[0] if len(shown) == 1 else (f"{shown[0]} … {shown[-1]} ({len(shown)} distinct)" if shown else "")
        rows.append(f"| {gate} | {passed}/{len(runs)} | {measured.replace('|', '/')} |")
    return (
        f"On {_machine(d['machine'])}: **{d['passed']}/{len(runs)} byte-identical re-registrations of {d['production']} passed every gate**"
        f" ({d['seconds_per_run']:.0f} s per gated run); gate failures: {d['failures'] or 'none'}.\n\n| gate | passed | measured (first …"
        " last, sorted) |\n|---|---|---|\n" + "\n".join(rows)
    )


def gate_overhead(d: dict) -> str:
    rows = "\n".join(f"| {k} | {v:.2f} |" for k, v in sorted(d["steps"].items(), key=lambda kv: -kv[1]))
    return (
        f"On {_machine(d['machine'])}, {'fresh build' if d['fresh'] else 'cached build'}, outcome {d['outcome']}: steps"
        f" {d['total_seconds']:.1f} s in all; **safety + health {d['safety_and_health_seconds']:.2f} s = {d['share']:.1%} of the gated"
        f" run** (the health measurement inside merged_model: {d['health_in_merged_model_seconds']:.2f} s).\n\n| step | seconds"
        " |\n|---|---|\n" + rows
    )


def peak(d: dict) -> str:
    return (
        f"On {_machine(d['machine'])}: peak MatMulInteger {d['peak_int_ops_per_s'] / 1e9:.1f} G integer ops/s (best of"
        f" {', '.join(f'{k}³' for k in d['peak_by_size'])}); the served artifact ({d['variant']} INT8, sha256 {d['artifact_sha256'][:12]})"
        f" does {d['int_macs_per_token'] / 1e6:.2f} M integer multiply-accumulates per token, {d['int_ops_per_request'] / 1e6:.1f} M"
        f" integer ops per request at the evaluation texts' mean of {d['mean_tokens_per_request']:.1f} tokens; at concurrency 32 it served"
        f" {d['requests_per_s_at_32']:.0f} requests/s = {d['achieved_int_ops_per_s'] / 1e9:.2f} G ops/s, **{d['achieved_over_peak']:.1%} of"
        f" peak** (target ≥ {d['target']:.0%})." + _where_time_goes(d.get("where_time_goes"))
    )


def _where_time_goes(w: dict | None) -> str:
    if not w:
        return ""
    total = w["profile_total_seconds"]
    rows = "\n".join(f"| {op} | {sec:.3f} | {sec / total:.0%} |" for op, sec in w["profile_seconds_by_op"].items() if sec / total >= 0.005)
    return (
        "\n\nWhere the time goes. The artifact alone, without HTTP (two one-thread calls at once, length buckets of 32):"
        f" {w['model_alone_items_per_s']:.0f} items/s = **{w['model_alone_over_peak']:.1%} of peak**. Inside it, the integer"
        f" matrix-multiply kernels run at {w['integer_matmul_kernels_int_ops_per_s_one_thread'] / 1e9:.0f} G ops/s on one thread"
        f" (**{w['integer_matmul_kernels_int_ops_per_s_one_thread'] / w['peak_per_core_int_ops_per_s']:.0%} of the per-core peak**) but"
        f" take only {w['integer_matmul_share_of_time']:.0%} of its time. ONNX Runtime's per-node profile of one pass, by operator:\n\n|"
        " operator | seconds | share |\n|---|---|---|\n" + rows
    )


def adapter_designs(d: dict) -> str:
    a, b = d["a_per_version"], d["b_shared_base"]
    med = statistics.median
    return (
        f"On {_machine(d['machine'])}, {d['adapters']} adapters, {d['texts']} evaluation texts one per call.\n\n| | (a) per version | (b)"
        f" shared base |\n|---|---|---|\n| once per base | — | {b['base_seconds_once']:.1f} s (export, LoRA inputs, fusion, INT8) |\n| to"
        f" add one adapter (median) | {med(a['seconds_to_add_one']):.1f} s (merge, export, fuse, INT8, open) |"
        f" {1000 * med(b['seconds_to_add_one']):.1f} ms (write and load its .onnx_adapter) |\n| memory per adapter |"
        f" {a['rss_mb_per_adapter']:.1f} MB | {b['rss_mb_per_adapter']:.2f} MB |\n| items/s (adapter 0, one text per call) |"
        f" {a['items_per_s']:.0f} | {b['items_per_s']:.0f} |\n| fused ops | Attention, EmbedLayerNormalization, SkipLayerNormalization,"
        f" BiasGelu | {', '.join(f'{k} {v}' for k, v in b['fused_ops'].items())} |\n\n(b) against (a) on the same adapters: top-1 agreement"
        f" {min(d['top1_agreement_b_vs_a']):.2%} at worst, largest logit difference {max(d['max_abs_logit_diff_b_vs_a']):.3f}; the"
        f" adapters' own outputs differ by {d['adapters_differ_in_b_by']:.3f} on average in (b)."
    )


def adapters_of_base(d: dict) -> str:
    t = d["targets"]
    rows = "\n".join(
        f"| {i + 1} | {r['version']} | {r['outcome']}{' (' + ', '.join(r['failed_gates']) + ')' if r['failed_gates'] else ''} | "
        f"{r['verdict_seconds']:.1f} | {r['step_seconds'].get('quantized_model', 0.0):.1f} |"
        for i, r in enumerate(d["runs"])
    )
    steps = sorted(d["later_step_seconds_median"].items(), key=lambda kv: -kv[1])
    return (
        f"On {_machine(d['machine'])}, {d['adapters']} adapters of all-MiniLM-L6-v2 registered as a new model and gated one after another:"
        f" first **{d['first_verdict_seconds']:.1f} s**, later ones **{d['later_verdict_seconds_median']:.1f} s** (median) from"
        f" registration to verdict (target ≤ {t['verdict_seconds']:g} s); **Nth / first {d['nth_over_first']:.2f}** (target ≤"
        f" {t['nth_over_first']:g}; last / first {d['last_over_first']:.2f}).\n\n| adapter | version | outcome | registration → verdict s |"
        " quantized_model s |\n|---|---|---|---|---|\n"
        + rows
        + "\n\nWhere a later adapter's gated run goes (median step seconds, steps over 0.5 s): "
        + "; ".join(f"{k} {v:.1f}" for k, v in steps if v > 0.5)
        + "."
    )


def run_overhead(d: dict) -> str:
    rows = "\n".join(
        f"| {r['candidate']} | {r['executor']} | {r['status']} | {r['wall_seconds']:.1f} | {r['step_seconds_sum']:.1f} |"
        f" {r['wall_over_steps']:.2f} |"
        for r in d["runs"]
    )
    med = d["wall_over_steps_median"]
    return (
        f"On {_machine(d['machine'])}: later adapters of a new model (the demo's, scaled), each gated by `dagster job execute` "
        f"as a run worker executes a run. Wall time over the sum of step times, median: **multiprocess {med['multiprocess']:.2f}, "
        f"in process {med['in_process']:.2f}** (target ≤ {d['target']:g}).\n\n"
        "| candidate | executor | status | run wall s | sum of steps s | wall / steps |\n|---|---|---|---|---|---|\n" + rows
    )


def sensor_tick(d: dict) -> str:
    rows = "\n".join(
        f"| {r['models']} | {r['versions']} | {r['runs_launched']} | {r['registry_search_calls_first_tick']} | "
        f"{r['first_tick_seconds_median']:.2f} | {r['quiet_tick_seconds_median']:.2f} |"
        for r in d["sizes"].values()
    )
    return (
        f"On {_machine(d['machine'])}, MLflow on {d['backend']}, pages of {d['page_size']}; median of {d['ticks']} evaluations each.\n\n|"
        " candidate models | versions | runs launched by the first tick | registry searches in it | first tick s | tick with nothing new s"
        " |\n|---|---|---|---|---|---|\n" + rows
    )


def _met(target: dict) -> str:
    return "met" if target["met"] else "**not met**"


def llm(d: dict) -> str:
    r = d["runtimes"]
    rows = "\n".join(
        f"| {name} | {x['decode_tokens_per_s']:.1f} | {x['decode_vs_torch']:.2f}× | {x['ttft_ms_p50']:.0f} / {x['ttft_ms_p99']:.0f} | "
        f"{x['perplexity']:.3f} | {x['top1_agreement']:.2%} | {x['top1_in_top5']:.2%} |"
        for name, x in r["rows"].items()
    )
    assets = [
        a
        for a in ("merged_model", "onnx_model", "quantized_model", "evaluation", "drift_report", "benchmark_results")
        if a in d["gating"][0].get("asset_seconds", {})
    ]
    gates = "\n".join(
        f"| {g['adapter']} | {g['seconds']:.1f} | {g['outcome']} | " + " | ".join(f"{g['asset_seconds'][a]:.1f}" for a in assets) + " |"
        for g in d["gating"]
    )
    t, o = d["targets"], d["base_build"]
    return (
        f"Measured on {_machine(d['machine'])}; {d['model']}, base build rank {o['rank']} on {', '.join(o['targets'])}, MatMulNBits 8-bit "
        f"(accuracy_level {o['accuracy_level']}); the adapter trained {d['train_steps']} steps ({d['train_seconds']:.0f} s). "
        f"{r['prompts']} chat prompts (median {r['median_prompt_tokens']:.0f} tokens), up to {r['new_tokens']} greedy tokens, median of "
        f"{r['rounds']} interleaved rounds; quality on {r['positions']} teacher-forced positions of {r['replies']} evaluation replies, "
        "agreement against torch + peft FP32.\n\n"
        "| runtime | decode tokens/s | vs torch | TTFT p50 / p99 ms | perplexity | top-1 agreement | top-1 in reference top-5 |\n"
        "|---|---|---|---|---|---|---|\n"
        + rows
        + "\n\n| adapter of the base | seconds, registration to verdict | outcome | "
        + " | ".join(f"{a} s" for a in assets)
        + " |\n|---|---|---|"
        + "---|" * len(assets)
        + "\n"
        + gates
        + f"\n\nThe later adapters over the first: **{d['nth_over_first']:.2f}** (target ≤ {t['nth_over_first']['target']:g},"
        f" {_met(t['nth_over_first'])}; the first builds and times the base once); a later adapter's registration to verdict:"
        f" **{d['later_verdict_seconds']:.0f} s** (target ≤ {t['later_verdict_seconds']['target']:.0f} s,"
        f" {_met(t['later_verdict_seconds'])})."
        + (
            " Load average (1 min) on the machine before and after the gating: {:.2f} and {:.2f} on {} cores.".format(
                d["load_average"]["before_gating"][0], d["load_average"]["after_gating"][0], d["machine"]["cores"]
            )
            if "load_average" in d
            else ""
        )
    )


def llm_serving(d: dict) -> str:
    s, fid, m, r, t, w = d["servers"], d["fidelity"], d["many_adapters"], d["roofline"], d["targets"], d["swaps"]
    rows, lim = s["rows"], fid["limits"]
    modelcd_name = "modelcd serve"

    def speeds(name: str | None) -> str:
        if name is None:
            return " | ".join(["—"] * 7)
        x = rows[name]
        cells = [f"{x[n][c]['aggregate_tokens_per_s']:.1f}" for n in ("1", "4") for c in ("1", "4", "8")]
        return " | ".join(cells) + f" | {x['1']['1']['ttft_ms_p50']:.0f} / {x['1']['1']['ttft_ms_p99']:.0f}"

    table = []
    for name, f in fid["rows"].items():
        timed = modelcd_name if f.get("served") else (name if name in rows else None)
        why = (
            "served (the gate's choice)"
            if f.get("served")
            else ("timed" if timed else ("not chosen" if f["runtime"] == "modelcd" else "not timed"))
        )
        q = f["fidelity"]
        table.append(
            f"| {name} | {q['mean_kl']:.4f} | {q['top1_in_top5']:.2%} | {q['perplexity_change']:+.2%} | "
            f"{'within' if f['within_limits'] else '**outside**'} | {why} | {speeds(timed)} |"
        )
    hand = next(n for n in rows if n.startswith("hand-written"))
    h = rows[hand]["1"]
    goals = "\n".join(f"| {k} | {v['target']} | {v['measured']} | {_met(v)} |" for k, v in t.items())
    against = ", ".join(f"{k.replace('/', ' adapter(s), c')}: {v}" for k, v in s["compared_with"].items())
    many = "\n".join(f"| {k} | {x['aggregate_tokens_per_s']:.1f} | {x['rss_mb']:.0f} |" for k, x in m["by_count"].items())
    steps = "; ".join(f"{k} {v:.0f} ms" for k, v in w["load_step_ms_idle_median"].items())
    agree = "; ".join(f"{k} {v['top5_agreement']:.1%}" for k, v in d["agreement"].items())
    return (
        f"Measured on {_machine(d['machine'])}; {d['model']}. The weight variant modelcd serves: **{d['served_variant']}**, chosen by"
        f" the fidelity gate when the first adapter was gated (the fastest variant within its limits). Fidelity: teacher-forced on"
        f" {fid['positions']} positions of {fid['replies']} evaluation replies against modelcd's FP32 reference with production's"
        f" adapter, as the fidelity gate scores a variant (limits: top-1 in FP32's top 5 ≥ {lim['min_top1_in_top5']:.1%}, mean KL ≤"
        f" {lim['max_mean_kl']:g}, perplexity ≤ {lim['max_perplexity_change']:+.0%}). Speed: {s['prompts']} chat prompts,"
        f" {s['new_tokens']} greedy tokens streamed over HTTP, median of {s['rounds']} rounds in rotating order, {s['threads']}"
        " threads; llama-server with `-np` equal to the concurrency and its prompt cache off; with 4 adapters, request i names"
        " adapter i mod 4.\n\n"
        "| weights | mean KL | top-1 in top 5 | perplexity | fidelity gate | served | tokens/s c1 | c4 | c8 | 4 adapters c1 | c4 | c8 |"
        " TTFT c1 p50 / p99 ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
        + "\n".join(table)
        + f"\n\nThe {hand} server: aggregate {h['1']['aggregate_tokens_per_s']:.1f}, {h['4']['aggregate_tokens_per_s']:.1f}"
        f" and {h['8']['aggregate_tokens_per_s']:.1f} tokens/s at concurrency 1, 4 and 8, TTFT p50 / p99 at concurrency 1"
        f" {h['1']['ttft_ms_p50']:.0f} / {h['1']['ttft_ms_p99']:.0f} ms. Each ratio over llama-server is over its fastest format"
        f" within the fidelity limits at that adapter set and concurrency ({against}). Top-5 agreement of each server's answers at"
        f" concurrency 1 with the FP32 reference: {agree}.\n\n| target | wanted | measured | |\n|---|---|---|---|\n"
        + goals
        + f"\n\nSwaps under load ({w['clients']} clients streaming; steady phases of {w['phase_seconds']:g} s, swapping phases until"
        f" their swaps were done): {w['swaps']} swaps in {w['swapping_seconds']:.0f} s, {len(w['failed_swaps'])} refused or failed;"
        f" {w['failed_requests']} failed of {w['requests']} requests; TTFT p99 swapping {w['swapping_ttft_p99_ms']:.0f} ms over steady"
        f" {w['steady_ttft_p99_ms']:.0f} ms. A whole verified load takes {w['load_ms_idle_median']:.0f} ms at idle (at most"
        f" {w['load_ms_idle_max']:.0f}) and {w['load_ms_under_load_median']:.0f} ms under load (the loader runs below requests'"
        f" priority). Its steps at idle: {steps}.\n\n| adapters loaded on one base | aggregate tokens/s ({m['requests']} requests,"
        f" {m['at_once']} at a time, {m['new_tokens']} tokens) | resident MB |\n|---|---|---|\n"
        + many
        + f"\n\nAn adapter file is {m['adapter_file_mb']:.2f} MB; loading one into the batched session takes {m['load_ms_median']:.1f} ms"
        f" (at most {m['load_ms_max']:.1f}).\n\nRoofline: {r['weight_bytes'] / 1e6:.0f} MB of weights read per decoded token at"
        f" {r['decode_tokens_per_s']:.1f} tokens/s is {r['weight_gb_per_s']:.2f} GB/s, {r['share_of_triad']:.0%} of the"
        f" {r['triad_gb_per_s']:.1f} GB/s a STREAM-like triad reaches on the same cores; "
        + "; ".join(
            f"{name}'s {x['gguf']} reads {x['weight_bytes'] / 1e6:.0f} MB a token at {x['decode_tokens_per_s']:.1f} tokens/s:"
            f" {x['weight_gb_per_s']:.2f} GB/s, {x['share_of_triad']:.0%} of the triad"
            for name, x in r["llama_cpp"].items()
        )
        + "."
    )


def batch_dependence(d: dict) -> str:
    diffs, ms = d["next_token_logits_max_abs_diff_batched_vs_batch1"], d["decode_step_ms_with_adapter"]
    base = ms["int8_accuracy_level_4"]
    rows = "\n".join(f"| {k} | {v:.3g} |" for k, v in diffs.items())
    cost = "\n".join(
        f"| {k} | {v['1']:.2f} | {v['1'] / base['1']:.2f}× | {v['8']:.2f} | {v['8'] / base['8']:.2f}× |" for k, v in ms.items()
    )
    first = d.get("first_differing_output")
    return (
        f"Measured on {_machine(d['machine'])}; {d['prompts']} prompts, each prefilled and decoded one step at batch 1 and as "
        f"{' and '.join(map(str, d['batches']))} copies in plain ONNX Runtime; the first row's next-token logits compared.\n\n"
        "| graph | max \\|Δlogit\\| batched against batch 1 |\n|---|---|\n"
        + rows
        + "\n\n| graph, with the adapter | decode step ms, batch 1 | over as built | batch 8 | over as built |\n|---|---|---|---|---|\n"
        + cost
        + (
            f"\n\nThe first output to differ in the graph as built: `{first['output']}` ({first['op']}), by {first['max_abs_diff']:.3g}."
            if first
            else ""
        )
    )


def block_invariance(d: dict) -> str:
    def block(name: str, r: dict) -> str:
        w, wo, ms, over = r["with_adapter"], r["without_adapter"], r["decode_step_ms"], r["step_over_served"]
        return (
            f"| {name} | {r['block_size']} | {'yes' if r['symmetric'] else 'no'} | {w['equal']}/{w['sequences']} | "
            f"{w['max_abs_logit_diff']:.3g} | {wo['equal']}/{wo['sequences']} | {wo['max_abs_logit_diff']:.3g} | "
            f"{ms['1']:.2f} | {over['1']:.2f}× | {ms['8']:.2f} | {over['8']:.2f}× |"
        )

    rows = "\n".join(block(name, r) for name, r in d["blocks"].items())
    return (
        f"Measured on {_machine(d['machine'])}; {d['model']}; adapter: {d['adapter']}; MatMulNBits accuracy_level "
        f"{d['accuracy_level']}. {d['prompts']} prompts, {d['new_tokens']} greedy tokens each, decoded alone and in one batch "
        "(each with the adapter, beside a row on the build's own slots), then teacher-forced on the tokens decoded alone; "
        "decode step median of interleaved rounds.\n\n"
        "| weights | block | symmetric | equal, with the adapter | max \\|Δlogit\\| | equal, without | max \\|Δlogit\\| "
        "| step ms, batch 1 | speed over block 32 | step ms, batch 8 | speed over block 32 |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
        + rows
        + "\n\n"
        + "; ".join(f"{name}: **{x['measured']:.3g}** (target {x['target']}, {_met(x)})" for name, x in d["targets"].items())
        + "."
    )


def lm_variants(d: dict) -> str:
    lim, t = d["limits"], d["targets"]

    def widths(r: dict) -> str:
        return ", ".join(f"{n} at {b} bits" for b, n in r["matmuls_by_bits"].items())

    rows = "\n".join(
        f"| {name} | {r['variant']['algorithm']} | {widths(r)} | {r.get('zero_points', '–')} | {r['fidelity']['mean_kl']:.4f} | "
        f"{r['fidelity']['top1_in_top5']:.2%} | "
        f"{r['fidelity']['perplexity_change']:+.2%} | {'within' if r['within_limits'] else '**outside**'} | {r['weight_bytes'] / 1e6:.0f} "
        f"| "
        f"{r['decode_tokens_per_s']:.1f} | {r['decode_over_int8']:.2f}× | {r['ttft_ms']:.0f} |"
        for name, r in d["variants"].items()
    )
    return (
        f"Measured on {_machine(d['machine'])}; {d['model']}. Fidelity to the FP32 twin with the adapter on {d['replies']} evaluation "
        f"replies, teacher-forced, as the fidelity gate scores it; the limits are the demo policy's (top-1 in FP32's top 5 ≥ "
        f"{lim['min_top1_in_top5']:.1%}, mean KL ≤ {lim['max_mean_kl']:g}, perplexity ≤ {lim['max_perplexity_change']:+.0%}). Speed in "
        f"process: {d['prompts']} prompts, {d['new_tokens']} greedy tokens, median of {d['rounds']} interleaved rounds.\n\n"
        "| variant | algorithm | MatMuls | zero points | mean KL | top-1 in top 5 | perplexity | fidelity gate | MB read a token |"
        " decode tokens/s | over INT8 | TTFT ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n"
        + rows
        + f"\n\nThe fastest within the limits: **{d['chosen'] or 'none'}**. "
        + "; ".join(f"{name}: **{x['measured']}** (target {x['target']}, {_met(x)})" for name, x in t.items())
        + "."
    )


def lm_batching(d: dict) -> str:
    n = d["adapters"]
    sides = {"": "one adapter", f"_{n}_adapters": f"{n} adapters, prompt i on adapter i mod {n}"}

    def row(k: str, v: float) -> str:
        side = next((s for s in sides if s and k.endswith(s)), "")
        name, batch = k.removesuffix(side), k.removesuffix(side).removeprefix("batch_")
        checked = d["batched_vs_alone"].get(f"{batch}{side}") if name != "alone" else None
        same = (
            f"{checked['same_tokens']}/{d['prompts']} rows, max \\|Δlogit\\| {checked['max_abs_logit_diff']:.3g}"
            if checked
            else ("(the reference)" if name == "alone" else "not checked")
        )
        return f"| {sides[side]} | {name.replace('_', ' ')} | {v:.1f} | {d['over_alone'][k]:.2f}× | {same} |"

    scales = f" (LoRA B scaled by {', '.join(f'{x:g}' for x in d['adapter_scales'])})"
    return (
        f"Measured on {_machine(d['machine'])}; {d['model']}. {d['prompts']} evaluation prompts, greedy, up to {d['new_tokens']} tokens "
        f"or EOS ({', '.join(f'{made} tokens with {sides[side]}' for side, made in d['generated_tokens'].items())}, "
        "the same on every way of decoding them); "
        f"adapters{scales}; aggregate tokens/s, median of {d['rounds']} interleaved rounds.\n\n"
        "| adapters | decoded | tokens/s | over alone | the same as alone |\n|---|---|---|---|---|\n"
        + "\n".join(row(k, v) for k, v in d["tokens_per_s"].items())
        + "\n\n"
        + "; ".join(f"{name}: **{x['measured']}** (target {x['target']}, {_met(x)})" for name, x in d["targets"].items())
        + "."
    )


def lm_speculative(d: dict) -> str:
    rows = "\n".join(
        f"| {name} | {r['tokens_per_s']:.1f} | {r['over_plain']:.2f}× | "
        + (
            f"{r['acceptance_rate']:.1%} | {r['accepted_share_of_tokens']:.1%} | {r['answers_equal_plain']} of {d['prompts']} |"
            if "acceptance_rate" in r
            else "— | — | — |"
        )
        for name, r in d["rows"].items()
    )
    t = d["targets"]
    goals = "; ".join(f"{k}: **{v['measured']}** (target {v['target']}, {_met(v)})" for k, v in t.items())
    return (
        f"Measured on {_machine(d['machine'])}; {d['model']}. {d['prompts']} evaluation chat prompts, up to {d['new_tokens']} greedy"
        f" tokens each, batch 1, median of {d['rounds']} interleaved rounds; tokens/s over the whole generation, prefill"
        " included.\n\n| decoding | tokens/s | over plain | acceptance rate | answer tokens from accepted drafts | answers equal to plain"
        " |\n|---|---|---|---|---|---|\n" + rows + f"\n\nThe fastest setting, {d['best']}: {goals}."
    )


def gguf_fidelity(d: dict) -> str:
    lim = d["limits"]
    rows = "\n".join(
        f"| {name} | {r['file_mb']:.0f} | {r['fidelity']['mean_kl']:.4f} | {r['fidelity']['top1_in_top5']:.2%} | "
        f"{r['fidelity']['top1_agreement']:.2%} | {r['fidelity']['perplexity_change']:+.2%} | "
        f"{'within' if r['within_limits'] else '**outside**'} |"
        for name, r in d["rows"].items()
    )
    return (
        f"Measured on {_machine(d['machine'])}; {d['model']}. Every row teacher-forced on the ids of {d['replies']} evaluation "
        f"replies and scored against {d['reference']}, as the fidelity gate scores a variant; the limits are the demo policy's "
        f"(top-1 in FP32's top 5 ≥ {lim['min_top1_in_top5']:.1%}, mean KL ≤ {lim['max_mean_kl']:g}, perplexity ≤ "
        f"{lim['max_perplexity_change']:+.0%}). The adapter: {d['lora']}.\n\n"
        "| weights | file MB | mean KL | top-1 in top 5 | top-1 agreement | perplexity | fidelity gate |\n|---|---|---|---|---|---|---|\n"
        + rows
    )


def demo(d: dict) -> str:
    t = d["targets"]
    total, outcomes = t["make demo on a fresh clone, install included (s)"], t["the demo's outcomes"]
    rows = "\n".join(
        f"| {p['task']} | {p['phase']}{' (reused)' if p.get('reused') else ''}"
        + (f" (in the background; waited {p['waited']:.0f} s)" if p.get("overlapped") else "")
        + f" | {p['seconds']:.0f} | "
        + (", ".join(f"{k} {v:.0f}" for k, v in sorted(p.get("steps", {}).items(), key=lambda kv: -kv[1]) if v >= 1) or "")
        + " |"
        for p in d["phases"]
    )
    rolled = {p["task"]: p for p in d["phases"] if p["phase"] == "roll out good"}
    gated = {p["task"]: p for p in d["phases"] if p["phase"] == "gate good"}
    to_production = "; ".join(
        f"{task} {gated[task]['seconds'] + p['seconds']:.0f} s (its gates {gated[task]['seconds']:.0f} s, its steps on live traffic"
        f" {p['seconds']:.0f} s, {p['status']})"
        for task, p in rolled.items()
    )
    return (
        f"{_machine(d['machine'])}, at {d['commit'][:7]}; load averages before {', '.join(f'{x:.2f}' for x in d['load_before'])}.\n\n"
        f"`make install` {d['install_seconds']:.0f} s, then `make demo` {d['demo_seconds']:.0f} s: **{total['measured']:.0f} s** "
        f"against {total['target']:.0f} s ({_met(total)}); the demo's outcomes as expected: {_met(outcomes)}.\n\n"
        + (f"The good adapter from registration to 100% of traffic under the demo's rollout policy: {to_production}.\n\n" if rolled else "")
        + "| task | phase | s | its steps, s (1 s or more, longest first) |\n|---|---|---|---|\n"
        + rows
    )


def rollout(d: dict) -> str:
    cost, t = d["shadow_cost"], d["targets"]
    phases = "\n".join(
        f"| {i + 1} | {'shadow ' + format(d['shadow_share'], 'g') if p['shadow'] else 'none'} | {p['requests']} | {p['failed']} |"
        f" {p['p50_ms']:.1f} | {p['p99_ms']:.1f} | {p['shadow_dropped']:.0f} |"
        + (f" {p['shadow_pairs']:.0f} |" if "shadow_pairs" in p else " – |")
        for i, p in enumerate(cost["phases"])
    )
    (shadow_key, shadow_t), (clean_key, clean_t), (found_key, found_t) = t.items()
    clean = d["clean_rollouts"]
    found = "\n".join(
        f"| {f['class']} | {f['expected']} | {f['actual']} | {'yes' if f['ok'] else 'NO'} | {f['detail']} |" for f in d["detection"]
    )
    return (
        f"{_machine(d['machine'])}; {d['model']} in a fault sandbox, {d['seconds']:.0f} s in all.\n\n"
        f"Production's p99 with a shadow {d['shadow_share']:g} state over none, side by side on one server (2 callers, closed loop):"
        f" **{shadow_t['measured']:.2f}×** against ≤ {shadow_t['target']:g}× ({_met(shadow_t)}; pairs"
        f" {', '.join(f'{r:.2f}' for r in cost['p99_ratios'])}).\n\n"
        "| phase | rollout | production's answers | failed | p50 ms | p99 ms | shadow copies dropped | shadow pairs compared |\n"
        "|---|---|---|---|---|---|---|---|\n"
        + phases
        + "\n\nClean rollouts (byte-identical copies through the demo policy's steps"
        + (f", each set to {d['step_seconds']:g} s" if "step_seconds" in d else "")
        + f"): {len(clean) - clean_t['measured']} of {len(clean)}"
        f" reached production, {clean_t['measured']} not ({_met(clean_t)}); {statistics.median(c['seconds'] for c in clean):.0f} s each"
        " (median), gate included.\n\n"
        f"Live-only faults stopped as expected: {found_t['measured']} of {found_t['target']} ({_met(found_t)}).\n\n"
        "| class | expected | actual | ok | where, and the samples it took |\n|---|---|---|---|---|\n" + found
    )


def mutation(d: dict) -> str:
    return (
        f"Measured {d['when'][:10]}.\n\n| mutants | killed | survived | timed out | no tests | score (killed / all)"
        f" |\n|---|---|---|---|---|---|\n| {d['total']} | {d['killed']} | {d['survived']} | {d['timeout']} | {d['no_tests']} |"
        f" **{d['score']:.1%}** |"
    )


BLOCKS: dict[str, tuple[str, str, Callable[[dict], str], str]] = {
    "int8": ("benchmarks.md", "int8.json", int8, "make bench"),
    "serving": ("benchmarks.md", "serving.json", serving, "make bench-serving"),
    "peak": ("benchmarks.md", "peak.json", peak, "python bench/bench_peak.py"),
    "adapter_designs": ("benchmarks.md", "adapter_designs.json", adapter_designs, "python bench/bench_adapter_designs.py"),
    "adapters_of_base": ("benchmarks.md", "adapters_of_base.json", adapters_of_base, "make bench-gates"),
    "calibration": ("benchmarks.md", "calibration.json", calibration, "python bench/bench_calibration.py"),
    "recalibration": ("benchmarks.md", "recalibration.json", recalibration, "make bench-recalibration"),
    "false_block": ("benchmarks.md", "false_block.json", false_block, "make bench-gates"),
    "gate_overhead": ("benchmarks.md", "gate_overhead.json", gate_overhead, "python bench/bench_gate_overhead.py --fresh"),
    "run_overhead": ("benchmarks.md", "run_overhead.json", run_overhead, "python bench/bench_run_overhead.py"),
    "sensor_tick": ("benchmarks.md", "sensor_tick.json", sensor_tick, "python bench/bench_sensor_tick.py"),
    "llm": ("benchmarks.md", "llm.json", llm, "make bench-llm"),
    "llm_serving": ("benchmarks.md", "llm_serving.json", llm_serving, "make bench-llm-serving"),
    "lm_variants": ("benchmarks.md", "lm_variants.json", lm_variants, "make bench-lm-variants"),
    "lm_batching": ("benchmarks.md", "lm_batching.json", lm_batching, "make bench-lm-batching"),
    "gguf_fidelity": ("benchmarks.md", "gguf_fidelity.json", gguf_fidelity, "make bench-gguf-fidelity"),
    "lm_speculative": ("benchmarks.md", "lm_speculative.json", lm_speculative, "make bench-lm-speculative"),
    "batch_dependence": (
        "benchmarks.md",
        "batch_dependence.json",
        batch_dependence,
        "python bench/batch_dependence.py BASE_BUILD ADAPTER_FILE",
    ),
    "block_invariance": (
        "benchmarks.md",
        "block_invariance.json",
        block_invariance,
        "python bench/block_invariance.py BASE_BUILD [ADAPTER_FILE]",
    ),
    "mutation": ("reliability.md", "mutation.json", mutation, "make mutation"),
    "demo": ("benchmarks.md", "demo.json", demo, "python bench/bench_demo.py"),
    "rollout": ("benchmarks.md", "rollout.json", rollout, "make bench-rollout"),
    "rollout_llm": ("benchmarks.md", "rollout_llm.json", rollout, "make bench-rollout"),
    "faults": ("reliability.md", "faults.json", faults, "modelcd faults run --controls 10 --json bench/results/faults.json"),
    "faults_llm": (
        "reliability.md",
        "faults_llm.json",
        faults,
        "modelcd faults run --task causal-lm --controls 10 --json bench/results/faults_llm.json",
    ),
    "lm_seeds": ("reliability.md", "lm_seeds.json", lm_seeds, "make bench-lm-seeds"),
}


def render(docs: Path = ROOT / "docs", results: Path = RESULTS) -> list[str]:
    """Rewrite every render block; returns the names rendered."""
    done = []
    for name, (doc, source, fn, command) in BLOCKS.items():
        path = docs / doc
        text = path.read_text()
        pattern = re.compile(rf"(<!-- render:{name} -->\n)(?:.*?\n)?(<!-- /render:{name} -->)", re.S)
        if not pattern.search(text):
            continue
        data = results / source
        body = fn(json.loads(data.read_text())) if data.is_file() else f"_No results yet: run `{command}`._"
        path.write_text(pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text))
        done.append(name)
    return done


if __name__ == "__main__":
    print("rendered:", ", ".join(render()) or "nothing (no render blocks found)")
    sys.exit(0)
