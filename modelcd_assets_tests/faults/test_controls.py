"""faults/controls: the retrained controls are the production's recipe with seeds CONTROL_SEEDS + 1.., from its base."""

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from modelcd_assets.faults.controls import CONTROL_SEEDS, retrained_controls


@dataclass(frozen=True)
class Recipe:
    steps: int = 7
    seed: int = 0


def test_each_retrained_control_is_the_recipe_with_its_own_seed_from_productions_base(tmp_path):
    calls = []

    def train(base, examples, out_dir, cfg, base_uri, desc):
        calls.append((base, examples, out_dir, cfg, base_uri, desc))
        return out_dir

    sb = SimpleNamespace(work=tmp_path, prod=SimpleNamespace(base=Path("/bases/b"), base_uri="models:/b/1"))
    controls = retrained_controls(sb, 2, train, ["x"], Recipe())
    assert controls == [
        ("retrained-1", f"retrained, seed {CONTROL_SEEDS + 1}", tmp_path / "retrained-1"),
        ("retrained-2", f"retrained, seed {CONTROL_SEEDS + 2}", tmp_path / "retrained-2"),
    ]
    assert [c[3] for c in calls] == [Recipe(7, CONTROL_SEEDS + 1), Recipe(7, CONTROL_SEEDS + 2)]
    assert {(c[0], tuple(c[1]), c[4]) for c in calls} == {(Path("/bases/b"), ("x",), "models:/b/1")}
    assert retrained_controls(sb, 0, train, ["x"], Recipe()) == []
