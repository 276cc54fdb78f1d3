"""merged_model: the adapter folded into its base, as safetensors (cached by content)."""

import shutil
import time
from pathlib import Path

import dagster as dg

from modelcd_assets.defs.assets.candidate import candidate
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.inference.builds import write_json
from modelcd_assets.lib.model.artifact import ADAPTER
from modelcd_assets.lib.model.health import measure
from modelcd_assets.lib.model.model_io import merge_adapter
from modelcd_assets.lib.release.registry import TOKENIZER_CHANGE, CandidateRef
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource


@dg.asset(partitions_def=candidates, deps=[candidate], group_name="build", kinds={"pytorch", "safetensors"})
def merged_model(context: dg.AssetExecutionContext, state: LocalStateResource, registry: MlflowRegistryResource) -> dg.MaterializeResult:
    """One deployable model folder (reused when the same base and adapter were merged before), and its health report."""
    ref = CandidateRef.parse(context.partition_key)
    record = state.record(ref)
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
    merge_seconds = time.perf_counter() - start
    reg = registry.registry()
    prod = record.baseline(state.root)
    prod_merged = prod.build.merged if prod and prod.ref != ref else None
    # An adapter's tokenizer is its base's; a full model is compared with the tokenizer production serves, when there is one.
    reference = Path(record.base_dir) if record.kind == ADAPTER else prod_merged
    health = measure(build.merged, record.kind, Path(record.artifact_dir), Path(record.base_dir) if record.base_dir else None, record.base_uri,
                     reference, reg.tags(ref).get(TOKENIZER_CHANGE) == "true", production_merged=prod.build.merged if prod else None)
    write_json(state.files(ref).health, health)
    size = sum(p.stat().st_size for p in build.merged.iterdir())
    return dg.MaterializeResult(
        metadata={"build": build.key, "reused_from_cache": cached, "merge_seconds": round(merge_seconds, 2),
                  "health_seconds": round(time.perf_counter() - start - merge_seconds, 2), "size_mb": round(size / 2**20, 2),
                  "probe_deterministic": health["probe_deterministic"], "weight_norm_outliers": dg.MetadataValue.json(health.get("weight_norm_outliers") or {})},
        data_version=dg.DataVersion(build.key),
    )
