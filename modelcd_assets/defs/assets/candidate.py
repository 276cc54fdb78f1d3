"""candidate: the registered artifact, fetched from the registry and verified against its manifest."""

import dagster as dg

from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.artifact import ADAPTER, inspect_artifact
from modelcd_assets.lib.builds import Build
from modelcd_assets.lib.candidate import CandidateRecord
from modelcd_assets.lib.hashing import folder_hash
from modelcd_assets.lib.registry import BASE, CONTENT, CandidateRef
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource


@dg.asset(partitions_def=candidates, group_name="candidate", kinds={"mlflow"})
def candidate(context: dg.AssetExecutionContext, state: LocalStateResource, registry: MlflowRegistryResource) -> dg.MaterializeResult:
    """The candidate version's files and, for an adapter, its registered base model."""
    ref = CandidateRef.parse(context.partition_key)
    reg = registry.registry()
    tags = reg.tags(ref)
    folder = reg.fetch(ref, state.candidate_dir(ref) / "artifact")
    info = inspect_artifact(folder)
    base_uri = base_hash = base_dir = None
    if info.kind == ADAPTER:
        base_uri = tags.get(BASE)
        base_ref = CandidateRef.from_uri(base_uri)
        base_hash = reg.tags(base_ref)[CONTENT]
        base_path = state.cache_dir("bases") / base_hash[:24]
        if not base_path.is_dir():
            reg.fetch(base_ref, base_path)
        base_dir = str(base_path)
    content = tags[CONTENT]
    record = CandidateRecord(
        name=ref.name, version=ref.version, kind=info.kind, content_hash=content, artifact_dir=str(folder),
        build_dir=str(Build.for_content(state.cache_dir("builds"), base_hash, content).dir), base_uri=base_uri,
        base_hash=base_hash, base_dir=base_dir,
    )
    record.save(state.candidate_dir(ref))
    files = sorted(p.name for p in folder.iterdir())
    return dg.MaterializeResult(
        metadata={
            "kind": info.kind,
            "content_sha256": content,
            "base": base_uri or "(full model)",
            "files": dg.MetadataValue.md("\n".join(f"- `{f}`" for f in files)),
            "size_mb": round(sum(p.stat().st_size for p in folder.iterdir()) / 2**20, 2),
        },
        data_version=dg.DataVersion(folder_hash(folder)[:16]),
    )
