"""`modelcd faults run`: every fault class gated in a sandbox against its expected outcome, then the clean controls."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from modelcd_assets.faults.builders import Candidate
from modelcd_assets.faults.catalog import FaultClass, FaultSuite, select, suite_of
from modelcd_assets.faults.live_faults import live_notes, offline_only, roll_out
from modelcd_assets.faults.outcomes import CODE_RAN, ERROR, NOT_REPRODUCIBLE, REFUSED, Outcome
from modelcd_assets.faults.report import ClassResult, ControlResult, SelftestReport
from modelcd_assets.faults.sandbox import Sandbox, open_sandbox
from modelcd_assets.lib.errors import BadCandidate, ModelcdError
from modelcd_assets.lib.release.registry import Registry
from modelcd_assets.lib.tasks.names import DEFAULT_TASK

ROLLED_OUT_KIND = "rolled out on live traffic"
ROLLED_OUT_KINDS = ("byte-identical", "retrained")  # the last control of each is rolled out (a kind's first word)


def _gate_candidate(sb: Sandbox, fc: FaultClass, cand: Candidate) -> Outcome:
    try:
        ref = sb.upload_raw(cand) if cand.raw else sb.register(cand)
    except BadCandidate as e:
        return Outcome(REFUSED, detail=str(e))
    with fc.during(sb, ref) if fc.during else contextlib.nullcontext():
        run = sb.gate(ref, fc.traffic)
    return sb.judge(ref, run, fc.expected.gate)


def class_outcome(sb: Sandbox, fc: FaultClass) -> Outcome:
    """What happened to one fault class in the sandbox; the sandbox's production is restored afterwards."""
    cand, measured = None, ""
    try:
        if fc.reproducible is not None:
            reproduced, measured = fc.reproducible(sb)
            if not reproduced:
                return Outcome(NOT_REPRODUCIBLE, detail=measured)
        with contextlib.nullcontext() if fc.live else offline_only(sb):
            if fc.probe is not None:
                outcome = fc.probe(sb)
            elif fc.build is None:
                outcome = sb.judge(sb.production, sb.gate(sb.production, fc.traffic), fc.expected.gate)
            else:
                cand = fc.build(sb.prod, sb.work / fc.name)
                outcome = _gate_candidate(sb, fc, cand)
    except Exception as e:  # noqa: BLE001 - a class the sandbox could not build or gate is reported, never counted as caught
        outcome = Outcome(ERROR, detail=f"{type(e).__name__}: {e}")
    finally:
        sb.restore_production()
    if cand is not None and cand.marker is not None and cand.marker.exists():
        return Outcome(CODE_RAN, detail=f"{cand.marker} exists: code planted in the candidate ran")
    return replace(outcome, detail=f"reproduced: {measured}; {outcome.detail}") if measured else outcome


def run_classes(sb: Sandbox, classes: list[FaultClass], echo: Callable[[str], None]) -> list[ClassResult]:
    results = []
    for i, fc in enumerate(classes, 1):
        start = time.perf_counter()
        actual = class_outcome(sb, fc)
        result = ClassResult(fc.name, fc.group, fc.summary, fc.expected, actual, time.perf_counter() - start)
        results.append(result)
        echo(f"[{i}/{len(classes)}] {fc.name}: {actual}" + ("" if result.ok else f"  (expected {fc.expected})"))
    return results


def _gate_control(sb: Sandbox, label: str, kind: str, folder: Path, under_load: bool, rolled_out: bool = False) -> ControlResult:
    """A clean candidate gated (offline_only), or rolled out on live traffic (live_faults.roll_out): it must become production."""
    start = time.perf_counter()
    try:
        ref = sb.register(Candidate(folder))
        if rolled_out:
            outcome = roll_out(sb, ref)
        else:
            with offline_only(sb):
                outcome = sb.judge(ref, sb.gate(ref))
    except Exception as e:  # noqa: BLE001 - a control that could not be gated counts as blocked
        outcome = Outcome(ERROR, detail=f"{type(e).__name__}: {e}")
    finally:
        sb.restore_production()
    return ControlResult(label, f"{kind}, {ROLLED_OUT_KIND}" if rolled_out else kind, under_load, outcome, time.perf_counter() - start)


def run_controls(
    sb: Sandbox, suite: FaultSuite, identical_n: int, retrained_n: int, under_load: bool, echo: Callable[[str], None], notes: list[str]
) -> tuple[list[ControlResult], dict]:
    """The suite's clean candidates, which must all be promoted; half of each kind (rounded up) gated beside a server under
    load, and the last of each kind rolled out on live traffic when the suite has live classes (FaultSuite.live_load)."""
    controls = suite.controls(sb, identical_n, retrained_n, notes)
    if under_load and suite.load_texts is None:
        notes.append(f"{sb.task}: {suite.no_load}")
        under_load = False
    by_kind: dict[str, list[str]] = {}
    for label, kind, _ in controls:
        by_kind.setdefault(kind.split(",")[0], []).append(label)
    loaded = {label for labels in by_kind.values() for label in labels[: (len(labels) + 1) // 2]} if under_load else set()
    rolled = {labels[-1] for kind, labels in by_kind.items() if kind in ROLLED_OUT_KINDS} if suite.live_load else set()
    loaded -= rolled
    results, load = [], {}

    def gate_all(batch):
        for label, kind, folder in batch:
            result = _gate_control(sb, label, kind, folder, label in loaded, label in rolled)
            results.append(result)
            echo(f"control {label} ({kind}{', server under load' if result.under_load else ''}): {result.outcome}")

    if loaded:
        from modelcd_assets.faults.load import serving_under_load

        with serving_under_load(sb.env, sb.name, suite.load_texts(sb), sb.root / "serve-under-load.log") as stats:
            gate_all([c for c in controls if c[0] in loaded])
        load = {"requests": stats.requests, "errors": stats.errors}
        notes.append(
            f"server under load: {stats.requests} requests answered while {len(loaded)} controls were gated, {stats.errors} failed"
            + "".join(f"; {f}" for f in stats.failures)
        )
    gate_all([c for c in controls if c[0] not in loaded])
    return results, load


def run_selftest(
    name: str,
    source_env: Mapping[str, str],
    *,
    only: list[str] | None = None,
    identical_controls: int = 5,
    retrained_controls: int = 5,
    under_load: bool = True,
    root: Path | None = None,
    keep: bool = False,
    progress: bool = False,
    echo: Callable[[str], None] = print,
    task: str | None = None,
    live_step_seconds: float | None = None,
) -> SelftestReport:
    """Gate every selected fault class of the production's task and the clean controls in a sandbox copy of name's production;
    the user's registry is only read."""
    source = Registry.from_env(source_env)
    user_prod = source.production(name)
    prod_task = source.task(user_prod) if user_prod else (task or DEFAULT_TASK)
    if task is not None and task != prod_task:
        raise ModelcdError(
            f"{name}'s production is a {prod_task} model: its faults are the {prod_task} classes, not {task}'s; pass --task {prod_task} "
            f"or the --name of a {task} model"
        )
    suite, classes = suite_of(prod_task), select(only, prod_task)
    root = Path(root) if root else Path(tempfile.mkdtemp(prefix="modelcd-faults-"))
    report = SelftestReport(name, user_prod.uri if user_prod else "none", "")
    try:
        echo(f"fault sandbox in {root}: copying {report.production} and gating it there")
        with open_sandbox(name, source_env, root, progress, live_step_seconds) as sb:
            skipped = [fc.name for fc in classes if fc.adapter_only and not sb.prod.is_adapter]
            if skipped:
                report.notes.append(f"production is a full model: adapter classes not run ({', '.join(skipped)})")
            if suite.live_load is not None:
                report.notes += live_notes(sb)
            report.classes = run_classes(sb, [fc for fc in classes if fc.name not in skipped], echo)
            if identical_controls or retrained_controls:
                report.controls, report.load = run_controls(
                    sb, suite, identical_controls, retrained_controls, under_load, echo, report.notes
                )
    finally:
        if keep:
            echo(f"sandbox kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    after = source.production(name)
    report.user_production_after = after.uri if after else "none"
    return report
