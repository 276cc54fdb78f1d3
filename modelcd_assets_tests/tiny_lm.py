"""The session fixture `tiny_lm`: a tiny causal LM pre-trained on the demo's chats (seconds), its base build, and an adapter
trained on it (a pytest plugin of conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from modelcd_assets.lib.causal_lm.base import build_tiny_causal_lm
from modelcd_assets.lib.causal_lm.build import BaseBuild, BaseBuildOptions, build_base
from modelcd_assets.lib.causal_lm.training import LmTraining, pretrain_in_place, train_lm_adapter
from modelcd_assets.lib.demo.replies import chats, corpus

TINY_OPTIONS = BaseBuildOptions(rank=4, targets=("q_proj", "v_proj"))
TINY_ADAPTER = LmTraining(steps=30, rank=4, alpha=8, learning_rate=5e-3)
# The tiny base's slots (rank 4), a tiny model's perplexity, and short timing rounds of the base build. No adapter is
# timed (every adapter of the base runs its build's graph), so an inconclusive speed blocks, as by default.
TINY_LM_POLICY = """\
adapter_slots:
  rank: 4
perplexity:
  max_perplexity: 3.0
generation:
  max_new_tokens: 80
  min_eos_share: 0.5
  evaluation_replies: 40
  drift_prompts: 12
  speed_prompts: 2
throughput:
  pairs: 6
  max_pairs: 6
golden_prompts:
  - prompt: "i was charged twice for my invoice. please advise."
    expect: "billing"
"""


@dataclass(frozen=True)
class TinyLm:
    base: Path
    build: BaseBuild
    adapter: Path
    root: Path

    def train(self, name: str, cfg: LmTraining = TINY_ADAPTER, base: Path | None = None) -> Path:
        return train_lm_adapter(base or self.base, chats(120, 7), self.root / name, cfg, "models:/tiny-lm-base/1", name)


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory) -> TinyLm:
    root = tmp_path_factory.mktemp("tiny_lm")
    train = chats(300, 1)
    base = build_tiny_causal_lm(root / "base", corpus(train))
    pretrain_in_place(base, train, steps=200)
    build = build_base(base, BaseBuild(root / "build"), TINY_OPTIONS)
    adapter = train_lm_adapter(base, chats(120, 7), root / "adapter", TINY_ADAPTER, "models:/tiny-lm-base/1")
    return TinyLm(base, build, adapter, root)
