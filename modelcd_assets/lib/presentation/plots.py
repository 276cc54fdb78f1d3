"""Small PNG plots embedded in Dagster metadata as markdown."""

from __future__ import annotations

import base64
import io

import numpy as np


def latency_plot_md(series: dict[str, list[float]], title: str) -> str:
    """Markdown with an inline PNG: latency distributions side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3), dpi=90)
    names = list(series)
    ax.boxplot([series[n] for n in names], showfliers=True)
    ax.set_xticks(range(1, len(names) + 1), names)
    for i, n in enumerate(names, 1):
        ax.plot([i - 0.3, i + 0.3], [np.percentile(series[n], 99)] * 2, "r--", lw=1)
    ax.set_ylabel("latency (ms)")
    ax.set_title(title + " (red: p99)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return f"![{title}](data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()})"
