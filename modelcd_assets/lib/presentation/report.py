"""Plain-text tables for the terminal."""

from __future__ import annotations


def table(headers: list[str], rows: list[list[str]], max_width: int = 70) -> str:
    """A fixed-width table; long cells are cut with an ellipsis."""

    def cut(s: str) -> str:
        s = str(s)
        return s if len(s) <= max_width else s[: max_width - 1] + "…"

    cells = [[cut(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(out)
