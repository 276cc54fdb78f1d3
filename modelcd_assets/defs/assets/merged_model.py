"""merged_model: the adapter folded into its base, as safetensors (cached by content)."""

import shutil
import time
from pathlib import Path

import dagster as dg

from modelcd_assets.defs.assets.candidate import candidate
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.artifact import ADAPTER
from modelcd_assets.lib.candidate import CandidateRecord
from modelcd_assets.lib.model_io import merge_adapter
from modelcd_assets.lib.registry import CandidateRef
from modelcd_assets.resources.state import LocalStateResource


@dg.asset(partitions_def=candidates, deps=[candidate], group_name="build", kinds={"pytorch", "safetensors"})
def merged_model(context: dg.AssetExecutionContext, state: LocalStateResource) -> dg.MaterializeResult:
    """One deployable model folder; reused when the same base and adapter were merged before."""
    record = CandidateRecord.load(state.candidate_dir(CandidateRef.parse(context.partition_key)))
    build = record.build
    cached = (build.merged / "config.json").is_file()
    start = time.perf_counter()
    if not cached:
        build.dir.mkdir(parents=True, exist_ok=True)
        if record.kind == ADAPTER:
            merge_adapter(Path(record.base_dir), Path(record.artifact_dir), build.merged)
        else:
            tmp = Path(str(build.merged) + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(record.artifact_dir, tmp)
            tmp.rename(build.merged)
    size = sum(p.stat().st_size for p in build.merged.iterdir())
    return dg.MaterializeResult(
        metadata={"build": build.key, "reused_from_cache": cached, "seconds": round(time.perf_counter() - start, 2), "size_mb": round(size / 2**20, 2)},
        data_version=dg.DataVersion(build.key),
    )
