"""The record of a fetched candidate: what it is, where its files and build live, and what it is judged against."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.inference.builds import Build, read_json, write_json
from modelcd_assets.lib.judging.policy import Policy
from modelcd_assets.lib.judging.rollout_policy import RolloutPolicy
from modelcd_assets.lib.layout import CandidateFiles, StateLayout
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.names import DEFAULT_TASK


@dataclass(frozen=True)
class CandidateRecord:
    name: str
    version: str
    kind: str  # adapter or full
    content_hash: str
    artifact_dir: str
    build_dir: str
    candidate_dir: str
    base_uri: str | None = None
    base_hash: str | None = None
    base_dir: str | None = None
    # The production version the candidate is judged against, read when it was fetched: every later step judges against
    # it, and promotion moves the alias only if production is still this version (compare-and-set). A version is never
    # judged against itself: when production itself is judged again (a re-run after a crash past the alias move), this is
    # the version it replaced (modelcd.previous_production), and regated_production says the alias was at the candidate.
    production_version: str | None = None
    production_content_hash: str | None = None
    regated_production: bool = False
    # The effective policy for this run and where it came from (a file's path, or "defaults").
    policy: dict = field(default_factory=dict)
    policy_source: str = "defaults"
    # The calibration set (sha256) its static INT8 is calibrated with: pinned on the version in the registry when first gated.
    calibration_sha256: str | None = None
    # What kind of model it is (lib/tasks/names.py): every task-dependent step asks lib/tasks/task.task_of(record.task).
    task: str = DEFAULT_TASK

    @property
    def ref(self) -> CandidateRef:
        return CandidateRef(self.name, self.version)

    @property
    def build(self) -> Build:
        return Build(Path(self.build_dir))

    @property
    def baseline_ref(self) -> CandidateRef | None:
        """Where the production alias was when the candidate was fetched: what promotion's compare-and-set expects and what
        the SemVer bump is declared over. The version judged against is production_version; they differ only for a re-gated production."""
        if self.regated_production:
            return self.ref
        return CandidateRef(self.name, self.production_version) if self.production_version else None

    def effective_policy(self) -> Policy:
        return Policy.model_validate(self.policy)

    def rollout(self) -> RolloutPolicy | None:
        """The steps this candidate takes on live traffic before it is production: its policy's rollout section, unless
        no_rollout_because() says why it has none (then production moves when its offline gates pass)."""
        return None if self.no_rollout_because() else self.effective_policy().rollout

    def no_rollout_because(self) -> str:
        """Why this candidate is not rolled out, in words; '' when its policy's rollout section applies. A first version has
        no production to be judged against on live traffic (as Argo Rollouts' first deploy, it takes production at once),
        and a re-gated production already serves every request."""
        if self.effective_policy().rollout is None:
            return "the policy has no rollout section: production moves when the offline gates pass"
        if self.regated_production:
            return "it is production already (judged again): there is no other version to roll it out against"
        if self.production_version is None:
            return (
                "it is the first version: there is no production to judge it against on live traffic, so it takes production "
                "when its offline gates pass"
            )
        return ""

    @property
    def files(self) -> CandidateFiles:
        return CandidateFiles(Path(self.candidate_dir))

    def quantization(self) -> dict:
        """What quantized_model decided for this candidate: the variant, why, the artifact's sha256 and its recorded probe outputs."""
        # Per candidate, not per build: models sharing a build may have different policies, so different choices.
        if not self.files.quantization.is_file():
            raise FileNotFoundError(f"{self.ref.uri} has no quantized model yet; materialize quantized_model for {self.ref.key} first")
        return read_json(self.files.quantization)

    def chosen_variant(self) -> str:
        return self.quantization()["chosen"]

    def chosen_artifact_id(self) -> str:
        """The build's name for the INT8 model quantized_model selected (records made before calibration revisions name only the
        variant)."""
        q = self.quantization()
        return q.get("artifact_id", q["chosen"])

    def chosen_int8(self) -> Path:
        """The INT8 model quantized_model selected for this candidate."""
        return self.build.int8(self.chosen_artifact_id())

    @property
    def quantization_report(self) -> Path:
        return self.build.quantization_report(self.calibration_sha256)

    def save(self) -> None:
        write_json(self.files.record, asdict(self))

    @classmethod
    def load(cls, candidate_dir: Path) -> "CandidateRecord":
        path = CandidateFiles(Path(candidate_dir)).record
        if not path.is_file():
            raise FileNotFoundError(f"no fetched candidate at {candidate_dir}; materialize the candidate asset for this partition first")
        raw = read_json(path)
        missing = {f.name for f in fields(cls) if f.name not in raw}
        if missing & {"candidate_dir"}:
            raise FileNotFoundError(f"{path} was written by an older modelcd; re-materialize the candidate asset for this partition")
        return cls(**raw)

    @classmethod
    def of(cls, state_root: Path, ref: CandidateRef) -> "CandidateRecord":
        """ref's record in the state folder state_root."""
        return cls.load(StateLayout(Path(state_root)).candidate(ref).dir)

    def baseline(self, state_root: Path) -> "CandidateRecord | None":
        """The record, in the state folder state_root, of the production version this candidate is judged against; None when there was
        none."""
        if self.production_version is None:
            return None
        ref = CandidateRef(self.name, self.production_version)
        if ref == self.ref:  # a record from before issue 17, or a bug: passing against itself would pass on nothing
            raise ModelcdError(
                f"{ref.uri} is recorded as its own baseline; a version is never judged against itself: re-gate it with "
                f"'modelcd gate {ref.name} {ref.version}' (production judged again is judged against the version it replaced)"
            )
        what = "previous production" if self.regated_production else "production"
        record = CandidateRecord.of(state_root, ref)
        if record.content_hash != self.production_content_hash:
            raise ModelcdError(
                f"the local record of {what} {ref.uri} holds other files (sha256 {record.content_hash[:12]}) than the registry "
                f"(sha256 {str(self.production_content_hash)[:12]}); run 'modelcd gate {ref.name} {ref.version}' to rebuild it"
            )
        if not record.files.quantization.is_file():
            raise FileNotFoundError(
                f"{what} {ref.uri} has no build in this state folder; run 'modelcd gate {ref.name} {ref.version}' to rebuild it"
            )
        return record


def policy_snapshot(policy: Policy, source: Path | None) -> tuple[dict, str]:
    """The policy as recorded with a candidate: every field with its effective value, and its source."""
    return json.loads(policy.model_dump_json()), str(source) if source else "defaults"
