"""Gate on artifact safety: runs on the fetched files before anything downstream deserializes a weight."""

from pathlib import Path

import dagster as dg

from modelcd_assets.defs.assets.candidate import candidate
from modelcd_assets.defs.checks.verdict import check_result
from modelcd_assets.defs.partitions import candidates
from modelcd_assets.lib.judging.gates import judge_safety
from modelcd_assets.lib.judging.safety import scan_artifact
from modelcd_assets.lib.release.artifact import ADAPTER
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.adapter_files import adapter_file_findings
from modelcd_assets.resources.state import LocalStateResource


@dg.asset_check(asset=candidate, blocking=True, partitions_def=candidates)
def artifact_is_safe(context: dg.AssetCheckExecutionContext, state: LocalStateResource) -> dg.AssetCheckResult:
    """Safetensors only, no code or auto_map, no links or paths leaving the folder, within the policy's size limits; base included.
    An adapter holds only the files its task lists, and those it shares with the base say what the base's say."""
    ref = CandidateRef.parse(context.partition_key)
    record = state.record(ref)
    limits = record.effective_policy().safety.limits()
    findings = [f"candidate {f}" for f in scan_artifact(Path(record.artifact_dir), limits)]
    if record.base_dir:
        findings += [f"base {f}" for f in scan_artifact(Path(record.base_dir), limits)]
    if record.kind == ADAPTER and not findings:  # what it compares is read only once the scan passed
        findings += [
            f"candidate {f}" for f in adapter_file_findings(Path(record.artifact_dir), record.task, Path(record.base_dir), limits.allow)
        ]
    return check_result(judge_safety(findings))
