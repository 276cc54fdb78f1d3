"""candidate: the registered artifact, fetched from the registry and verified against its manifest."""

import dagster as dg

from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.artifact import ADAPTER, inspect_artifact
from modelcd_assets.lib.builds import Build
from modelcd_assets.lib.candidate import CandidateRecord, policy_snapshot
from modelcd_assets.lib.errors import Superseded
from modelcd_assets.lib.hashing import folder_hash
from modelcd_assets.lib.registry import BASE, CALIBRATION, CONTENT, REVISION_OF, CandidateRef
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource


@dg.asset(partitions_def=candidates, group_name="candidate", kinds={"mlflow"})
def candidate(context: dg.AssetExecutionContext, state: LocalStateResource, registry: MlflowRegistryResource, policy: PolicyResource) -> dg.MaterializeResult:
    """The candidate version's files, its registered base, the production baseline it is judged against, and the effective policy."""
    ref = CandidateRef.parse(context.partition_key)
    reg = registry.registry()
    # Production is looked up once per run, here; every later step judges against this recorded baseline.
    prod = reg.production(ref.name)
    prod_hash = reg.tags(prod)[CONTENT] if prod else None
    tags = reg.tags(ref)
    revision_of = tags.get(REVISION_OF)
    if revision_of is not None and (prod is None or prod.version != revision_of):
        # Promoting it would put the older weights it carries back over the production that replaced them.
        raise Superseded(f"{ref.uri} is a calibration revision of version {revision_of}, but production is now "
                         f"{prod.version if prod else 'nothing'}; it is not gated. A new calibration set is re-applied to the current "
                         f"production by calibration_revision (or 'modelcd calibrate {ref.name} --from FILE')")
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
    # A version is its files plus the calibration set its static INT8 is calibrated with: the model's current set when
    # the version is first gated (the data folder's split when it has none), pinned on the version from then on, so
    # gating it again judges the same INT8. A calibration revision is registered with its set already pinned.
    calibration = tags.get(CALIBRATION)
    if calibration is None:
        calibration = reg.calibration_of(ref.name) or state.default_calibration()
        reg.set_tags(ref, {CALIBRATION: calibration})
    state.calibration_sets().require(calibration)
    effective, source = policy_snapshot(policy.for_model(ref.name), policy.path_for(ref.name))
    record = CandidateRecord(
        name=ref.name, version=ref.version, kind=info.kind, content_hash=content, artifact_dir=str(folder),
        build_dir=str(Build.for_content(state.cache_dir("builds"), base_hash, content).dir), candidate_dir=str(state.candidate_dir(ref)),
        base_uri=base_uri, base_hash=base_hash, base_dir=base_dir, production_version=prod.version if prod else None,
        production_content_hash=prod_hash, policy=effective, policy_source=source, calibration_sha256=calibration,
    )
    record.save()
    files = sorted(p.name for p in folder.iterdir())
    return dg.MaterializeResult(
        metadata={
            "kind": info.kind,
            "content_sha256": content,
            "base": base_uri or "(full model)",
            "production_baseline": f"{prod.version} (sha256 {prod_hash[:12]})" if prod else "none: first candidate",
            "calibration_sha256": calibration,
            "revision_of": tags.get(REVISION_OF, "(not a calibration revision)"),
            "policy_source": source,
            "policy": dg.MetadataValue.json(effective),
            "files": dg.MetadataValue.md("\n".join(f"- `{f}`" for f in files)),
            "size_mb": round(sum(p.stat().st_size for p in folder.iterdir()) / 2**20, 2),
        },
        data_version=dg.DataVersion(folder_hash(folder)[:16]),
    )
