"""The fault sandbox's report: each class against its expected outcome, the clean controls' false-block rate, the exit code.

A class whose fault cannot be produced on the model under test (not reproducible on this model, with what was measured)
is counted apart: neither caught nor missed, and left out of the interception rate.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from modelcd_assets.faults.outcomes import NOT_REPRODUCIBLE, PROMOTED, Outcome
from modelcd_assets.lib.presentation.report import table

CONFIDENCE = 0.95


def clopper_pearson(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The exact (Clopper–Pearson) two-sided interval of a binomial proportion k/n."""
    from scipy.stats import binomtest

    if n == 0:
        return 0.0, 1.0
    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class ClassResult:
    name: str
    group: str
    summary: str
    expected: Outcome
    actual: Outcome
    seconds: float

    @property
    def ok(self) -> bool:
        return self.actual.satisfies(self.expected)

    @property
    def not_reproducible(self) -> bool:
        """The fault could not be produced on this model: neither in its expected outcome nor missed."""
        return self.actual.kind == NOT_REPRODUCIBLE

    @property
    def verdict(self) -> str:
        """The report's ok cell."""
        return "yes" if self.ok else "not reproducible" if self.not_reproducible else "NO"


@dataclass(frozen=True)
class ControlResult:
    label: str
    kind: str  # "byte-identical" or "retrained, seed N"
    under_load: bool
    outcome: Outcome
    seconds: float

    @property
    def blocked(self) -> bool:
        """A clean candidate that did not become production, whatever stopped it."""
        return self.outcome.kind != PROMOTED


@dataclass
class SelftestReport:
    model: str
    production: str  # the user's production version the faults were derived from
    user_production_after: str  # the user's production once the sandbox is done: must be the same
    classes: list[ClassResult] = field(default_factory=list)
    controls: list[ControlResult] = field(default_factory=list)
    load: dict = field(default_factory=dict)  # requests the server under load answered while controls were gated
    notes: list[str] = field(default_factory=list)

    @property
    def reproduced(self) -> list[ClassResult]:
        """The classes whose fault was produced on this model: the ones that count as caught or missed."""
        return [r for r in self.classes if not r.not_reproducible]

    @property
    def not_reproducible(self) -> list[ClassResult]:
        return [r for r in self.classes if r.not_reproducible]

    @property
    def caught(self) -> int:
        return sum(r.ok for r in self.classes)

    @property
    def interception_rate(self) -> float:
        return self.caught / len(self.reproduced) if self.reproduced else 1.0

    @property
    def false_blocks(self) -> int:
        return sum(c.blocked for c in self.controls)

    @property
    def false_block_rate(self) -> float:
        return self.false_blocks / len(self.controls) if self.controls else 0.0

    @property
    def false_block_upper(self) -> float:
        return clopper_pearson(self.false_blocks, len(self.controls))[1]

    @property
    def user_production_unchanged(self) -> bool:
        return self.user_production_after == self.production

    @property
    def ok(self) -> bool:
        return self.caught == len(self.reproduced) and self.false_blocks == 0 and self.user_production_unchanged

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def class_table(self) -> str:
        rows = [[r.name, str(r.expected), str(r.actual), r.verdict, f"{r.seconds:.0f}"] for r in self.classes]
        return table(["class", "expected", "actual", "ok", "s"], rows, max_width=110)

    def control_table(self) -> str:
        rows = [
            [
                c.label,
                c.kind,
                "yes" if c.under_load else "no",
                str(c.outcome),
                "NO (false block)" if c.blocked else "yes",
                f"{c.seconds:.0f}",
            ]
            for c in self.controls
        ]
        return table(["control", "kind", "server under load", "outcome", "ok", "s"], rows, max_width=110)

    def summary(self) -> list[str]:
        lines = [
            f"fault classes: {self.caught}/{len(self.reproduced)} ended in their expected outcome (interception rate"
            f" {self.interception_rate:.0%})"
        ]
        if self.not_reproducible:
            lines.append(
                f"not reproducible on this model, counted apart (neither caught nor missed): {len(self.not_reproducible)} "
                f"({', '.join(r.name for r in self.not_reproducible)})"
            )
        if self.controls:
            lo, hi = clopper_pearson(self.false_blocks, len(self.controls))
            loaded = sum(c.under_load for c in self.controls)
            lines.append(
                f"clean controls: {self.false_blocks}/{len(self.controls)} blocked, false-block rate {self.false_block_rate:.1%} "
                f"(95% Clopper–Pearson interval [{lo:.1%}, {hi:.1%}]); {loaded} gated beside a server under load"
            )
        else:
            lines.append("clean controls: none gated (--controls 0); no false-block rate")
        lines.append(
            f"user's production {self.production}: "
            + ("unchanged" if self.user_production_unchanged else f"MOVED to {self.user_production_after}")
        )
        return lines

    def render(self) -> str:
        out = [f"fault sandbox for {self.model}, derived from production {self.production}", "", self.class_table()]
        mismatches = [r for r in self.reproduced if not r.ok]
        if self.not_reproducible:
            out += ["", "not reproducible on this model (what was measured):"]
            out += [f"  {r.name}: {r.actual.detail}" for r in self.not_reproducible]
        if mismatches:
            out += ["", "not in their expected outcome:"]
            out += [
                f"  {r.name}: expected {r.expected}, got {r.actual}" + (f": {r.actual.detail}" if r.actual.detail else "")
                for r in mismatches
            ]
        if self.controls:
            out += ["", self.control_table()]
            out += [f"  {c.label}: {c.outcome.detail}" for c in self.controls if c.blocked and c.outcome.detail]
        out += ["", *self.summary(), *self.notes, "", "PASS" if self.ok else "FAIL"]
        return "\n".join(out)

    def markdown(self) -> tuple[str, str]:
        """The class table and the control table as Markdown, for the gate_selftest asset in the UI."""

        def cell(text: str) -> str:
            return str(text).replace("|", "\\|").replace("\n", " ")

        classes = "| class | expected | actual | ok |\n|---|---|---|---|\n" + "\n".join(
            f"| {r.name} | {cell(r.expected)} | {cell(r.actual)} | {'**NO**' if r.verdict == 'NO' else r.verdict} |" for r in self.classes
        )
        controls = "| control | kind | server under load | outcome |\n|---|---|---|---|\n" + "\n".join(
            f"| {c.label} | {c.kind} | {'yes' if c.under_load else 'no'} | {cell(c.outcome)} |" for c in self.controls
        )
        return classes, controls

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "production": self.production,
            "user_production_after": self.user_production_after,
            "ok": self.ok,
            "interception_rate": self.interception_rate,
            "caught": self.caught,
            "reproduced": len(self.reproduced),
            "not_reproducible": [r.name for r in self.not_reproducible],
            "false_blocks": self.false_blocks,
            "controls": len(self.controls),
            "false_block_rate": self.false_block_rate,
            "false_block_upper_95": self.false_block_upper,
            "classes": [
                asdict(r)
                | {
                    "ok": r.ok,
                    "not_reproducible": r.not_reproducible,
                    "expected": str(r.expected),
                    "actual": str(r.actual),
                    "detail": r.actual.detail,
                }
                for r in self.classes
            ],
            "control_results": [
                asdict(c) | {"blocked": c.blocked, "outcome": str(c.outcome), "detail": c.outcome.detail} for c in self.controls
            ],
            "load": self.load,
            "notes": self.notes,
            # As the gate_selftest asset shows them in the UI: it runs `modelcd faults run --json` as its own process and reads this.
            "summary": self.summary() + self.notes,
            "markdown": dict(zip(("classes", "controls"), self.markdown())),
            "missed": [r.name for r in self.reproduced if not r.ok],
            "not_reproducible_details": {r.name: r.actual.detail for r in self.not_reproducible},
        }

    def write_json(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, default=str))
