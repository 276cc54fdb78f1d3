"""`modelcd faults run`: every fault class gated in a sandbox against its expected outcome, then the clean controls."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from modelcd_assets.faults.builders import Candidate, base_files_copied, identical
from modelcd_assets.faults.catalog import FaultClass, select
from modelcd_assets.faults.outcomes import CODE_RAN, ERROR, NOT_REPRODUCIBLE, REFUSED, Outcome
from modelcd_assets.faults.report import ClassResult, ControlResult, SelftestReport
from modelcd_assets.faults.sandbox import Sandbox, open_sandbox
from modelcd_assets.lib.causal_lm.training import LmTraining
from modelcd_assets.lib.classifier.training import Training
from modelcd_assets.lib.errors import BadCandidate, ModelcdError
from modelcd_assets.lib.release.registry import Registry
from modelcd_assets.lib.splits import read_split, split_path
from modelcd_assets.lib.tasks.names import CAUSAL_LM, DEFAULT_TASK

CONTROL_SEEDS = 100  # retrained control i trains with seed CONTROL_SEEDS + i (the demo's production used seed 0)
LOAD_TEXTS = 256


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


def _identical_controls(sb: Sandbox, n: int) -> list[tuple[str, str, Path]]:
    return [(f"identical-{i}", "byte-identical", identical(sb.prod, sb.work / f"identical-{i}").folder) for i in range(1, n + 1)]


def _retrained_controls(sb: Sandbox, n: int, train: Callable[[Path, int], Path]) -> list[tuple[str, str, Path]]:
    """n adapters retrained from production's base, control i with seed CONTROL_SEEDS + i; train(folder, seed) writes one."""
    return [
        (f"retrained-{i}", f"retrained, seed {CONTROL_SEEDS + i}", train(sb.work / f"retrained-{i}", CONTROL_SEEDS + i))
        for i in range(1, n + 1)
    ]


def _base_files_control(sb: Sandbox) -> list[tuple[str, str, Path]]:
    """Production's adapter with its base's tokenizer and config files copied beside it, byte for byte (an adapter production only)."""
    if not sb.prod.is_adapter:
        return []
    return [("base-files", "base's tokenizer and config files copied", base_files_copied(sb.prod, sb.work / "base-files", sb.task).folder)]


def _lm_controls(sb: Sandbox, identical_n: int, retrained_n: int, training: LmTraining) -> list[tuple[str, str, Path]]:
    """A causal LM's clean controls: byte-identical copies, LoRA B x 1.001, the base's files copied, production's weights saved as
    bfloat16 and as float16, and adapters retrained with other seeds."""
    from modelcd_assets.faults.llm_builders import lora_b_noise, saved_as
    from modelcd_assets.lib.causal_lm.chats import chat_split, read_chats
    from modelcd_assets.lib.causal_lm.training import train_lm_adapter

    chats = read_chats(split_path(sb.data, chat_split("train"))) if retrained_n else []
    return [
        *_identical_controls(sb, identical_n),
        ("lora-b-x1.001", "LoRA B x 1.001", lora_b_noise(sb.prod, sb.work / "lora-b-x1.001").folder),
        *_base_files_control(sb),
        *(
            (label, f"production's weights saved as {dtype}", saved_as(dtype)(sb.prod, sb.work / label).folder)
            for label, dtype in (("bf16", "bfloat16"), ("fp16", "float16"))
        ),
        *_retrained_controls(
            sb,
            retrained_n,
            lambda folder, seed: train_lm_adapter(
                sb.prod.base, chats, folder, replace(training, seed=seed), sb.prod.base_uri, desc=f"training control {folder.name}"
            ),
        ),
    ]


def _control_candidates(
    sb: Sandbox, identical_n: int, retrained_n: int, training: Training, notes: list[str], lm_training: LmTraining | None = None
) -> list[tuple[str, str, Path]]:
    """(label, kind, folder) of every clean control; the retrained ones are trained here, before any of them is gated."""
    if sb.task == CAUSAL_LM:
        return _lm_controls(sb, identical_n, retrained_n, lm_training or LmTraining())
    if retrained_n and not sb.prod.is_adapter:
        notes.append(
            f"production is a full model: its base is unknown, so {retrained_n} byte-identical controls replace the retrained ones"
        )
        identical_n, retrained_n = identical_n + retrained_n, 0
    from modelcd_assets.lib.classifier.training import train_adapter

    train = read_split(split_path(sb.data, "train")) if retrained_n else []
    return [
        *_identical_controls(sb, identical_n),
        *_base_files_control(sb),
        *_retrained_controls(
            sb,
            retrained_n,
            lambda folder, seed: train_adapter(
                sb.prod.base, train, folder, replace(training, seed=seed), sb.prod.base_uri, desc=f"training control {folder.name}"
            ),
        ),
    ]


def _gate_control(sb: Sandbox, label: str, kind: str, folder: Path, under_load: bool) -> ControlResult:
    start = time.perf_counter()
    try:
        ref = sb.register(Candidate(folder))
        outcome = sb.judge(ref, sb.gate(ref))
    except Exception as e:  # noqa: BLE001 - a control that could not be gated counts as blocked
        outcome = Outcome(ERROR, detail=f"{type(e).__name__}: {e}")
    finally:
        sb.restore_production()
    return ControlResult(label, kind, under_load, outcome, time.perf_counter() - start)


def run_controls(
    sb: Sandbox,
    identical_n: int,
    retrained_n: int,
    training: Training,
    under_load: bool,
    echo: Callable[[str], None],
    notes: list[str],
    lm_training: LmTraining | None = None,
) -> tuple[list[ControlResult], dict]:
    """Clean candidates that must all be promoted; half of each kind (rounded up) gated beside a server under load."""
    controls = _control_candidates(sb, identical_n, retrained_n, training, notes, lm_training)
    if under_load and sb.task == CAUSAL_LM:
        notes.append(
            "causal LM: the controls were gated without a server under load beside them (the load generator speaks POST /v1/classify only)"
        )
        under_load = False
    by_kind: dict[str, list[str]] = {}
    for label, kind, _ in controls:
        by_kind.setdefault(kind.split(",")[0], []).append(label)
    loaded = {label for labels in by_kind.values() for label in labels[: (len(labels) + 1) // 2]} if under_load else set()
    results, load = [], {}

    def gate_all(batch):
        for label, kind, folder in batch:
            result = _gate_control(sb, label, kind, folder, label in loaded)
            results.append(result)
            echo(f"control {label} ({kind}{', server under load' if result.under_load else ''}): {result.outcome}")

    if loaded:
        from modelcd_assets.faults.load import serving_under_load

        texts = [ex.text for ex in read_split(split_path(sb.data, "evaluation"))[:LOAD_TEXTS]]
        with serving_under_load(sb.env, sb.name, texts, sb.root / "serve-under-load.log") as stats:
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
    training: Training | None = None,
    under_load: bool = True,
    root: Path | None = None,
    keep: bool = False,
    progress: bool = False,
    echo: Callable[[str], None] = print,
    task: str | None = None,
    lm_training: LmTraining | None = None,
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
    classes = select(only, prod_task)
    root = Path(root) if root else Path(tempfile.mkdtemp(prefix="modelcd-faults-"))
    report = SelftestReport(name, user_prod.uri if user_prod else "none", "")
    try:
        echo(f"fault sandbox in {root}: copying {report.production} and gating it there")
        with open_sandbox(name, source_env, root, progress) as sb:
            skipped = [fc.name for fc in classes if fc.adapter_only and not sb.prod.is_adapter]
            if skipped:
                report.notes.append(f"production is a full model: adapter classes not run ({', '.join(skipped)})")
            report.classes = run_classes(sb, [fc for fc in classes if fc.name not in skipped], echo)
            if identical_controls or retrained_controls:
                report.controls, report.load = run_controls(
                    sb, identical_controls, retrained_controls, training or Training(), under_load, echo, report.notes, lm_training
                )
    finally:
        if keep:
            echo(f"sandbox kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    after = source.production(name)
    report.user_production_after = after.uri if after else "none"
    return report
