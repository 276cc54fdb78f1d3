"""Which weight variant a causal LM's base build is served as: the fastest one the fidelity gate passes.

Every variant of lib/causal_lm/variants.py is timed on the same cores, interleaved round by round, and then judged in
order of speed, fastest first, by the fidelity gate's own measure (teacher-forced against the FP32 twin, with the
adapter, on the evaluation replies). The first within the limits is chosen; those slower than it are not judged, and
those faster failed, by the amounts the report records. When none is within the limits, none is chosen: the fidelity
gate blocks, naming every failure. This is the classifier's static-versus-dynamic choice for a causal LM's weights.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from modelcd_assets.lib.causal_lm.decoder import Decoder

CHOICE_ROUNDS = 3  # timed rounds, each running every variant once; a variant's speed is its median round


@dataclass(frozen=True)
class Judged:
    passed: bool
    reason: str
    fidelity: dict


@dataclass
class VariantChoice:
    chosen: str | None
    tokens_per_s: dict[str, float]  # every variant's, as timed
    judged: dict[str, Judged] = field(default_factory=dict)  # in the order judged: fastest first, up to the chosen one

    @property
    def why(self) -> str:
        if self.chosen is None:
            failed = "; ".join(f"{n}: {j.reason}" for n, j in self.judged.items())
            return f"no weight variant is within the fidelity limits ({failed})"
        faster = [n for n in self.judged if n != self.chosen]
        speed = f"{self.tokens_per_s[self.chosen]:.1f} tokens/s"
        if not faster:
            return f"{self.chosen}: the fastest variant ({speed}), and within the fidelity limits"
        failed = "; ".join(f"{n} ({self.tokens_per_s[n]:.1f} tokens/s) failed: {self.judged[n].reason}" for n in faster)
        return f"{self.chosen}: the fastest variant within the fidelity limits ({speed}); faster ones failed fidelity: {failed}"

    def to_dict(self) -> dict:
        return {
            "chosen": self.chosen,
            "why": self.why,
            "tokens_per_s": self.tokens_per_s,
            "judged": {n: {"passed": j.passed, "reason": j.reason, "fidelity": j.fidelity} for n, j in self.judged.items()},
            "not_judged": [n for n in self.tokens_per_s if n not in self.judged],
        }


def generation_speeds(decoders: dict[str, Decoder], prompts: list[list[int]], new_tokens: int, adapter: str | None) -> dict[str, float]:
    """Each decoder's greedy generation speed on the same prompts: tokens (the EOS step counted) per second of generating
    them, prefill included; the decoders take turns, round by round, starting one later each round, and each one's
    speed is its median round."""
    if not decoders or not prompts:
        raise ValueError("timing variants needs at least one decoder and one prompt")
    names = list(decoders)
    rounds: dict[str, list[float]] = {n: [] for n in names}
    for r in range(CHOICE_ROUNDS):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            runs = [decoders[name].generate(p, new_tokens, adapter) for p in prompts]
            steps = sum(len(g.tokens) + g.stopped_at_eos for g in runs)
            rounds[name].append(steps / sum(g.first_token_s + g.decode_s for g in runs))
    return {n: statistics.median(v) for n, v in rounds.items()}


def choose_variant(tokens_per_s: dict[str, float], judge: Callable[[str], Judged]) -> VariantChoice:
    """The fastest variant judge passes, judging fastest first and stopping at the first that passes; None when none does."""
    choice = VariantChoice(None, dict(tokens_per_s))
    for name in sorted(tokens_per_s, key=lambda n: -tokens_per_s[n]):
        choice.judged[name] = judged = judge(name)
        if judged.passed:
            choice.chosen = name
            break
    return choice
