"""Monitoring production after the fact: one verdict per production model, where a model that could not be checked is
inconclusive, never a pass. live_traffic and production_recheck both judge through this loop."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from modelcd_assets.lib.judging.gates import INCONCLUSIVE, Verdict
from modelcd_assets.lib.release.registry import CandidateRef


def judge_each(
    productions: Mapping[str, CandidateRef],
    judge: Callable[[str, CandidateRef], Verdict],
    *,
    gate: str,
    not_done: str,
    unable: str,
    errors: tuple[type[BaseException], ...],
    log: Callable[[str], None],
    then: Callable[[str, CandidateRef, Verdict], None] | None = None,
) -> dict[str, Verdict]:
    """judge(model, production) for every model; one of errors (production never gated here, a missing report, ...) makes that
    model's verdict INCONCLUSIVE, measured as not_done, with the reason `{unable} {uri}: {error}`. Anything else propagates.
    then(model, production, verdict), when given, records each verdict as soon as it is decided, before the next model is judged."""
    verdicts: dict[str, Verdict] = {}
    for model, prod in productions.items():
        try:
            verdicts[model] = judge(model, prod)
        except errors as e:
            verdicts[model] = Verdict(gate, INCONCLUSIVE, not_done, "", f"{unable} {prod.uri}: {e}", {})
        if then is not None:
            then(model, prod, verdicts[model])
        log(f"{model} v{prod.version}: {verdicts[model].status}: {verdicts[model].reason}")
    return verdicts


def recorded(productions: Mapping[str, CandidateRef], verdicts: Mapping[str, Verdict]) -> dict[str, dict]:
    """The verdicts as a monitoring asset records them for its check (plain JSON: numpy numbers become floats)."""
    return {m: {"version": productions[m].version, **json.loads(json.dumps(v.to_dict(), default=float))} for m, v in verdicts.items()}
