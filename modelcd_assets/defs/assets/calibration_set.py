"""calibration_set: the texts that calibrate static INT8 ranges, versioned by content hash."""

import shutil

import dagster as dg

from modelcd_assets.lib.data import read_split
from modelcd_assets.lib.hashing import file_sha256
from modelcd_assets.resources.state import LocalStateResource


@dg.asset(group_name="data", kinds={"json"})
def calibration_set(state: LocalStateResource) -> dg.MaterializeResult:
    """A frozen copy of the calibration split under its sha256; quantized_model reads it by hash."""
    src = state.split("calibration")
    examples = read_split(src)
    digest = file_sha256(src)
    dst = state.root / "calibration" / f"{digest}.jsonl"
    if not dst.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst.with_suffix(".tmp"))
        dst.with_suffix(".tmp").rename(dst)
    return dg.MaterializeResult(
        metadata={"sha256": digest, "examples": len(examples), "path": dg.MetadataValue.path(str(dst))},
        data_version=dg.DataVersion(digest[:16]),
    )
