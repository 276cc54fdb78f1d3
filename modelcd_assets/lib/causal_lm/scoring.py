"""What the causal-LM gates judge, from logits and tokens: per-reply NLL, INT8-vs-FP32 token fidelity, repetition.

Plain numpy. A reply's NLL is the mean negative log-likelihood of its tokens given everything before them (teacher
forcing), so candidate and production are paired per reply; perplexity is exp of the mean NLL over every reply token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def log_softmax(logits: np.ndarray, dtype=np.float64) -> np.ndarray:
    x = np.asarray(logits, dtype)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def target_nll(scored: np.ndarray, targets) -> np.ndarray:
    """NLL of each target given the logits of the position before it: scored[i] predicts targets[i]."""
    logp = log_softmax(scored)
    return -logp[np.arange(len(logp)), np.asarray(targets)]


def token_nll(logits: np.ndarray, ids: list[int], reply_start: int) -> np.ndarray:
    """NLL of ids[reply_start:], each given the tokens before it; logits[t] predicts ids[t + 1]."""
    if not 0 < reply_start < len(ids):
        raise ValueError(f"the reply must start after the prompt and inside the sequence: start {reply_start} of {len(ids)} tokens")
    return target_nll(np.asarray(logits)[reply_start - 1 : len(ids) - 1], ids[reply_start:])


@dataclass(frozen=True)
class PositionFidelity:
    """INT8 against FP32 on the same teacher-forced positions."""

    positions: int
    top1_agreement: float
    top1_in_top5: float  # INT8's top-1 token is among FP32's five most likely
    mean_kl: float  # KL(FP32 || INT8), nats per position
    int8_perplexity: float
    fp32_perplexity: float

    @property
    def perplexity_change(self) -> float:
        return self.int8_perplexity / self.fp32_perplexity - 1

    def to_dict(self) -> dict:
        return {
            "positions": self.positions,
            "top1_agreement": self.top1_agreement,
            "top1_in_top5": self.top1_in_top5,
            "mean_kl": self.mean_kl,
            "int8_perplexity": self.int8_perplexity,
            "fp32_perplexity": self.fp32_perplexity,
            "perplexity_change": self.perplexity_change,
        }


class FidelityTally:
    """INT8 against FP32, one sequence at a time (a sequence's logits are [positions, vocab]; 100 replies of SmolLM2 are
    2,600 x 49,152 of them): sums per position in float32, totals in float64."""

    def __init__(self):
        self.positions = 0
        self._top1 = self._in_top5 = 0
        self._kl = self._q_nll = self._p_nll = 0.0

    def add(self, int8_logits: np.ndarray, fp32_logits: np.ndarray, targets) -> None:
        y = np.asarray(targets)
        if np.shape(int8_logits) != np.shape(fp32_logits) or len(y) != len(fp32_logits):
            raise ValueError(
                f"INT8 and FP32 must be scored on the same positions: {np.shape(int8_logits)} vs {np.shape(fp32_logits)}, {len(y)} targets"
            )
        q, p = log_softmax(int8_logits, np.float32), log_softmax(fp32_logits, np.float32)
        top1 = q.argmax(axis=1)
        k = min(5, p.shape[1])
        top5 = np.argpartition(-p, k - 1, axis=1)[:, :k]
        rows = np.arange(len(y))
        self.positions += len(y)
        self._top1 += int(np.sum(top1 == p.argmax(axis=1)))
        self._in_top5 += int(np.sum((top5 == top1[:, None]).any(axis=1)))
        self._kl += float(np.sum(np.sum(np.exp(p) * (p - q), axis=1, dtype=np.float64)))
        self._q_nll += float(-q[rows, y].sum(dtype=np.float64))
        self._p_nll += float(-p[rows, y].sum(dtype=np.float64))

    def result(self) -> PositionFidelity:
        if not self.positions:
            raise ValueError("no positions were scored: INT8 fidelity needs at least one evaluation reply")
        n = self.positions
        return PositionFidelity(
            positions=n,
            top1_agreement=self._top1 / n,
            top1_in_top5=self._in_top5 / n,
            mean_kl=self._kl / n,
            int8_perplexity=float(np.exp(self._q_nll / n)),
            fp32_perplexity=float(np.exp(self._p_nll / n)),
        )


def position_fidelity(int8_logits: list[np.ndarray], fp32_logits: list[np.ndarray], targets: list[np.ndarray]) -> PositionFidelity:
    """Over every scored position of every sequence: logits [n, vocab] per sequence and the true next tokens [n]."""
    if not (len(int8_logits) == len(fp32_logits) == len(targets)):
        raise ValueError(
            f"INT8 and FP32 must be scored on the same sequences: {len(int8_logits)}, {len(fp32_logits)} and {len(targets)} targets"
        )
    tally = FidelityTally()
    for q, p, y in zip(int8_logits, fp32_logits, targets):
        tally.add(q, p, y)
    return tally.result()


def repeated_ngram_share(tokens: list[int], n: int = 3) -> float:
    """Share of a generation's n-grams that already occurred earlier in it: 0 for no repetition, near 1 for a loop."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return 1 - len(set(grams)) / len(grams) if grams else 0.0
