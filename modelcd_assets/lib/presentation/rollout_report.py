"""A rollout's steps as the gate report shows them, under the offline gates: each step's move, and every live metric it was
judged on, with its samples, measurements, thresholds, p-value and the PromQL it was read with; and as a terminal shows
them (`modelcd rollout status`, the demo): a line per step."""

from __future__ import annotations

import math

from modelcd_assets.lib.presentation.report import table


def _cell(value) -> str:
    if isinstance(value, float):
        return "n/a" if not math.isfinite(value) else f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def rollout_markdown(history: list[dict], now: str) -> str:
    """history: lib/release/rollout.RolloutHistory's entries; now: the rollout state, described."""
    out = [f"### Rollout on live traffic\n\n**{now}**\n"]
    if not history:
        out.append("No step has been judged yet.\n")
    for entry in history:
        analysis = entry.get("analysis") or {}
        head = f"#### step {entry.get('step', 0) + 1}: {entry.get('kind')} {entry.get('share', 0):g}: **{entry.get('action')}**"
        said = f" by {entry.get('by')}" + (f" ({_cell(entry.get('reason'))})" if entry.get("reason") else "")
        out.append(head + said + "\n")
        if not analysis:
            out.append("A person's move: no analysis.\n")
            continue
        reasons = _cell("; ".join(analysis.get("reasons", [])))
        out.append(f"Outcome **{analysis.get('outcome')}**, score {_cell(float(analysis.get('score', 0)))}; {reasons}\n")
        rows = [
            "| metric | outcome | critical | samples | measured | thresholds | why | PromQL |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for m in analysis.get("metrics", []):
            samples = ", ".join(f"{k} {v}" for k, v in m.get("samples", {}).items())
            measured = ", ".join(f"{k} {_cell(v if v is not None else math.nan)}" for k, v in m.get("measured", {}).items())
            thresholds = ", ".join(f"{k} {_cell(v)}" for k, v in m.get("thresholds", {}).items())
            promql = "<br>".join(f"{k}: `{_cell(q)}`" for k, q in m.get("queries", {}).items())
            cls = m.get("outcome", "")
            rows.append(
                f"| {m.get('metric')} | {'**' + cls + '**' if cls != 'pass' else cls} | {'yes' if m.get('critical') else ''} | {samples} |"
                f" {measured} | {thresholds} | {_cell(m.get('reason', ''))} | {promql} |"
            )
        out.append("\n".join(rows) + "\n")
    return "\n".join(out)


def fewest_samples(analysis: dict) -> float | None:
    """The fewest samples any arm of any metric had in a step's analysis (a judged entry's `analysis`); None without any."""
    counts = [n for m in analysis.get("metrics", []) for n in m.get("samples", {}).values() if isinstance(n, (int, float))]
    return min(counts) if counts else None


def rollout_table(history: list[dict]) -> str:
    """A line per judged step: its share, the move, who made it, after how long, the analysis's outcome and score, the
    fewest samples an arm had, and each metric's outcome."""
    rows = []
    for entry in history:
        analysis = entry.get("analysis") or {}
        fewest = fewest_samples(analysis)
        rows.append(
            [
                str(entry.get("step", 0) + 1),
                f"{entry.get('kind')} {entry.get('share', 0):g}",
                entry.get("action", ""),
                entry.get("by", ""),
                f"{entry['seconds']:g} s" if "seconds" in entry else "",
                f"{analysis.get('outcome', '')} {analysis.get('score', '') if analysis else ''}".strip(),
                f"{fewest:g}" if fewest is not None else "",
                "; ".join(f"{m['metric']} {m['outcome']}" for m in analysis.get("metrics", [])),
            ]
        )
    return table(["step", "what", "move", "by", "after", "analysis", "fewest samples", "metrics"], rows, max_width=90)
