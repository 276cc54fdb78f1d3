"""The state layout has one owner: every per-candidate file name is spelled out in lib/layout.py and nowhere else."""

import re
from pathlib import Path

import pytest

from modelcd_assets.lib import layout
from modelcd_assets.lib.layout import StateLayout
from modelcd_assets.lib.release.registry import CandidateRef

ROOT = Path(__file__).resolve().parents[2]
# The package, the benches, the scripts and the tests (this file aside: it spells the layout out to check it).
SOURCES = sorted(
    p
    for folder in ("modelcd_assets", "bench", "scripts", "modelcd_assets_tests")
    for p in (ROOT / folder).rglob("*.py")
    if p != Path(__file__).resolve()
)
FOLDERS = (
    layout.CANDIDATES_DIR,
    layout.VARIANTS_DIR,
    layout.CACHE_DIR,
    layout.CALIBRATION_DIR,
    layout.ATTESTATIONS_DIR,
    layout.TRAFFIC_DIR,
    layout.ROLLOUTS_DIR,
    layout.FROM_TRAFFIC_DIR,
    layout.ARTIFACT_DIR,
    layout.LOCKS_DIR,
)


def places(pattern: str, sources: list[Path] = SOURCES, root: Path = ROOT) -> list[str]:
    """Source files (relative to root) whose text matches pattern."""
    return sorted(str(p.relative_to(root)) for p in sources if re.search(pattern, p.read_text()))


@pytest.mark.parametrize("name", [n for n in layout.CANDIDATE_FILES if "." in n])
def test_each_per_candidate_file_name_is_spelled_out_once(name):
    assert places(rf"[\"']{re.escape(name)}[\"']") == ["modelcd_assets/lib/layout.py"]


@pytest.mark.parametrize("name", FOLDERS)
def test_no_module_joins_a_state_folder_by_hand(name):
    """A folder of the layout is never joined onto a path outside lib/layout.py (`root / "candidates" / ...`)."""
    assert places(rf"/\s*[\"']{re.escape(name)}[\"']|[\"']{re.escape(name)}[\"']\s*/") == []


def test_the_grep_finds_a_file_name_written_by_hand(tmp_path):
    """The checks above can fail: a module that spells health.json out and joins "candidates" itself is found by both."""
    rogue = tmp_path / "rogue.py"
    rogue.write_text('report = home / "candidates" / name / version / "health.json"\n')
    assert places(r"[\"']health\.json[\"']", [rogue], tmp_path) == ["rogue.py"]
    assert places(r"/\s*[\"']candidates[\"']|[\"']candidates[\"']\s*/", [rogue], tmp_path) == ["rogue.py"]


def test_a_candidate_folder_holds_every_per_candidate_file(tmp_path):
    files = StateLayout(tmp_path).candidate(CandidateRef("m", "3"))
    assert files.dir == tmp_path / "candidates" / "m" / "3"
    held = [
        files.artifact,
        files.record,
        files.quantization,
        files.health,
        files.contract,
        files.evaluation,
        files.correctness,
        files.drift,
        files.benchmark,
    ]
    assert sorted(p.name for p in held) == sorted(layout.CANDIDATE_FILES) and {p.parent for p in held} == {files.dir}
    assert StateLayout(tmp_path).variant_decision("m", "k") == tmp_path / "candidates" / "m" / "variants" / "k.json"
    assert StateLayout(tmp_path).attestation("m", "3") == tmp_path / "attestations" / "m" / "3.intoto.json"
    assert StateLayout(tmp_path).traffic("m") == tmp_path / "traffic" / "m"
