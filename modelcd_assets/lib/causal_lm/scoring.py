"""What the causal-LM gates judge, from logits and tokens: per-reply NLL, INT8-vs-FP32 token fidelity, repetition.

Plain numpy. A reply's NLL is the mean negative log-likelihood of its tokens given everything before them (teacher
forcing), so candidate and production are paired per reply; perplexity is exp of the mean NLL over every reply token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def token_nll(logits: np.ndarray, ids: list[int], reply_start: int) -> np.ndarray:
    """NLL of ids[reply_start:], each given the tokens before it; logits[t] predicts ids[t + 1]."""
    if not 0 < reply_start < len(ids):
        raise ValueError(f"the reply must start after the prompt and inside the sequence: start {reply_start} of {len(ids)} tokens")
    logp = log_softmax(np.asarray(logits)[reply_start - 1 : len(ids) - 1])
    return -logp[np.arange(len(logp)), np.asarray(ids[reply_start:])]


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
        return {"positions": self.positions, "top1_agreement": self.top1_agreement, "top1_in_top5": self.top1_in_top5,
                "mean_kl": self.mean_kl, "int8_perplexity": self.int8_perplexity, "fp32_perplexity": self.fp32_perplexity,
                "perplexity_change": self.perplexity_change}


def position_fidelity(int8_logits: list[np.ndarray], fp32_logits: list[np.ndarray], targets: list[np.ndarray]) -> PositionFidelity:
    """Over every scored position of every sequence: logits [n, vocab] per sequence and the true next tokens [n]."""
    q = np.concatenate([log_softmax(x) for x in int8_logits])
    p = np.concatenate([log_softmax(x) for x in fp32_logits])
    y = np.concatenate([np.asarray(t) for t in targets])
    if q.shape != p.shape or len(y) != len(p):
        raise ValueError(f"INT8 and FP32 must be scored on the same positions: {q.shape} vs {p.shape}, {len(y)} targets")
    top1 = q.argmax(axis=1)
    k = min(5, p.shape[1])
    top5 = np.argpartition(-p, k - 1, axis=1)[:, :k]
    rows = np.arange(len(y))
    return PositionFidelity(
        positions=int(len(y)),
        top1_agreement=float(np.mean(top1 == p.argmax(axis=1))),
        top1_in_top5=float(np.mean((top5 == top1[:, None]).any(axis=1))),
        mean_kl=float(np.mean(np.sum(np.exp(p) * (p - q), axis=1))),
        int8_perplexity=float(np.exp(-q[rows, y].mean())),
        fp32_perplexity=float(np.exp(-p[rows, y].mean())),
    )


def repeated_ngram_share(tokens: list[int], n: int = 3) -> float:
    """Share of a generation's n-grams that already occurred earlier in it: 0 for no repetition, near 1 for a loop."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return 1 - len(set(grams)) / len(grams) if grams else 0.0
