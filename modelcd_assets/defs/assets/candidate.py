"""candidate: the registered artifact, fetched from the registry and verified against its manifest."""

import json

import dagster as dg

from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.errors import ModelcdError, Superseded
from modelcd_assets.lib.hashing import folder_hash
from modelcd_assets.lib.inference.builds import Build
from modelcd_assets.lib.judging.live_analysis import refuse_foreign_rollout
from modelcd_assets.lib.judging.triggers import refuse_foreign_triggers
from modelcd_assets.lib.release.artifact import ADAPTER, inspect_artifact
from modelcd_assets.lib.release.attestation import CALIBRATION_SET
from modelcd_assets.lib.release.candidate import CandidateRecord, policy_snapshot
from modelcd_assets.lib.release.registry import (
    BASE,
    CALIBRATION,
    CONTENT,
    PREVIOUS_PRODUCTION,
    PROMOTION,
    REVISION_OF,
    CandidateRef,
    Registry,
    version_task,
)
from modelcd_assets.lib.tasks.names import declaration_of, refuse_foreign_policy
from modelcd_assets.resources.policy import PolicyResource
from modelcd_assets.resources.registry import MlflowRegistryResource
from modelcd_assets.resources.state import LocalStateResource


def _promotion(tags: dict[str, str]) -> dict | None:
    """The recorded reason production last moved to a version (modelcd.promotion), or None."""
    try:
        reason = json.loads(tags[PROMOTION]) if PROMOTION in tags else None
    except ValueError:
        return None
    return reason if isinstance(reason, dict) else None


def _refuse_a_missing_alias(reg: Registry, ref: CandidateRef, instance: dg.DagsterInstance) -> None:
    """Raise when the model has no production alias but had a production: judging the candidate as a first one
    (floors only, no weight-scale, SemVer or prediction-drift comparison) would pass it on nothing."""
    promoted = {v.version: _promotion(tags) or {} for v in reg.versions(ref.name) if PROMOTION in (tags := reg.tags(v))}
    if not promoted:
        return

    def when(version: str) -> tuple[float, int]:  # the run that moved the alias, when this instance knows it; else the version
        record = instance.get_run_record_by_id(run_id) if isinstance(run_id := promoted[version].get("run_id"), str) else None
        return (record.create_timestamp.timestamp() if record else 0.0, int(version))

    last = max(promoted, key=when)
    raise ModelcdError(
        f"production alias missing: {ref.name} had a production version (last promoted: version {last}) but its `production` alias is"
        " gone; "
        f"{ref.uri} is not judged as a first candidate (floors only) when there was a production to compare with. Restore the alias to the "
        f'version that should serve (modelcd rollback needs a production to start from): python -c "from mlflow import MlflowClient; '
        f"MlflowClient('{reg.shown_uri}').set_registered_model_alias('{ref.name}', 'production', '{last}')\", then gate it again: "
        f"modelcd gate {ref.name} {ref.version}"
    )


def _judged_against_when_regated(ref: CandidateRef, tags: dict[str, str]) -> CandidateRef | None:
    """The baseline of production itself judged again: the version it replaced when a gated run promoted it (None when it was the
    first). A re-run after a crash past the alias move needs this; a version is never judged against itself."""
    promotion = _promotion(tags)
    previous = tags.get(PREVIOUS_PRODUCTION)
    if promotion is not None and "rollback_from" not in promotion and previous is not None and previous != ref.version:
        return CandidateRef(ref.name, previous) if previous else None
    how = (
        f"a rollback from version {promotion['rollback_from']} restored it, so what it was first judged against is not recorded"
        if promotion is not None and "rollback_from" in promotion
        else "no gated run promoted it (no modelcd.promotion record), so there is no earlier production it was judged against"
    )
    raise ModelcdError(
        f"{ref.uri} is production itself; a version is never judged against itself: {how}. Nothing was judged and production stays. "
        f"To judge its files again, register them as a new version ('modelcd register PATH --name {ref.name}'), which is judged against it"
    )


@dg.asset(partitions_def=candidates, group_name="candidate", kinds={"mlflow"})
def candidate(
    context: dg.AssetExecutionContext, state: LocalStateResource, registry: MlflowRegistryResource, policy: PolicyResource
) -> dg.MaterializeResult:
    """The candidate version's files, its registered base, the production baseline it is judged against, and the effective policy."""
    ref = CandidateRef.parse(context.partition_key)
    reg = registry.registry()
    # Production is looked up once per run, here; every later step judges against this recorded baseline.
    prod = reg.production(ref.name)
    tags = reg.tags(ref)
    if prod is None:
        _refuse_a_missing_alias(reg, ref, context.instance)
    baseline = _judged_against_when_regated(ref, tags) if prod == ref else prod
    prod_hash = reg.tags(baseline)[CONTENT] if baseline else None
    revision_of = tags.get(REVISION_OF)
    if revision_of is not None and (prod is None or prod.version != revision_of):
        # Promoting it would put the older weights it carries back over the production that replaced them.
        raise Superseded(
            f"{ref.uri} is a calibration revision of version {revision_of}, but production is now "
            f"{prod.version if prod else 'nothing'}; it is not gated. A new calibration set is re-applied to the current "
            f"production by calibration_revision (or 'modelcd calibrate {ref.name} --from FILE')"
        )
    folder = reg.fetch(ref, state.files(ref).artifact)
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
    task = version_task(tags)
    if baseline is not None and (baseline_task := reg.task(baseline)) != task:
        raise ModelcdError(
            f"{ref.uri} is a {task} model but {ref.name}'s production {baseline.uri} is a {baseline_task} model: one registered "
            "model serves one task, and nothing would compare them; register it under another name"
        )
    # A version is its files plus the calibration set its static INT8 is calibrated with: the model's current set when
    # the version is first gated (the data folder's split when it has none), pinned on the version from then on, so
    # gating it again judges the same INT8. A calibration revision is registered with its set already pinned.
    # A task whose INT8 is weight-only (a causal LM: no activations to calibrate) has no calibration set among its subjects.
    model_policy = policy.for_model(ref.name)
    source = policy.path_for(ref.name)
    refuse_foreign_policy(task, {*model_policy.model_fields_set, *(model_policy.model_extra or {})}, f"the policy file {source}")
    if model_policy.rollout is not None:
        refuse_foreign_rollout(task, model_policy.rollout, f"the policy file {source}")
    refuse_foreign_triggers(task, model_policy.triggers, f"the policy file {source}")
    calibration = tags.get(CALIBRATION)
    if calibration is None and CALIBRATION_SET in declaration_of(task).subjects:  # its INT8 is calibrated (static)
        calibration = reg.calibration_of(ref.name) or state.default_calibration()
        reg.set_tags(ref, {CALIBRATION: calibration})
    if calibration is not None:
        state.calibration_sets().require(calibration)
    effective, source = policy_snapshot(model_policy, source)
    record = CandidateRecord(
        name=ref.name,
        version=ref.version,
        kind=info.kind,
        content_hash=content,
        artifact_dir=str(folder),
        build_dir=str(Build.for_content(state.cache_dir("builds"), base_hash, content).dir),
        candidate_dir=str(state.files(ref).dir),
        base_uri=base_uri,
        base_hash=base_hash,
        base_dir=base_dir,
        production_version=baseline.version if baseline else None,
        production_content_hash=prod_hash,
        regated_production=prod == ref,
        policy=effective,
        policy_source=source,
        calibration_sha256=calibration,
        task=task,
    )
    record.save()
    files = sorted(p.name for p in folder.iterdir())
    return dg.MaterializeResult(
        metadata={
            "kind": info.kind,
            "task": task,
            "content_sha256": content,
            "base": base_uri or "(full model)",
            "production_baseline": (
                (f"{baseline.version} (sha256 {prod_hash[:12]})" if baseline else "none: first candidate")
                + (f" (production {prod.version} itself, judged again against the version it replaced)" if prod == ref else "")
            ),
            "calibration_sha256": calibration or "(none: weight-only INT8)",
            "revision_of": tags.get(REVISION_OF, "(not a calibration revision)"),
            "policy_source": source,
            "policy": dg.MetadataValue.json(effective),
            "files": dg.MetadataValue.md("\n".join(f"- `{f}`" for f in files)),
            "size_mb": round(sum(p.stat().st_size for p in folder.iterdir()) / 2**20, 2),
        },
        data_version=dg.DataVersion(folder_hash(folder)[:16]),
    )
