"""A classifier's loaded versions: each its gated INT8 artifact in an ONNX Runtime session of its own (serving/versions.py
says how a version gets in)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.hashing import bytes_sha256
from modelcd_assets.lib.release import attestation
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.names import CLASSIFICATION
from modelcd_assets.serving.classifier.engine import Engine, Served
from modelcd_assets.serving.consistency import Consistency, SwapRefused, compare
from modelcd_assets.serving.versions import Steps, VersionPool, scan


class ClassifierPool(VersionPool):
    """Loaded versions of one registered classifier, keyed by registry version."""

    task = CLASSIFICATION

    def _open(self, ref: CandidateRef, record: CandidateRecord, gated: dict, step: Steps) -> tuple[Served, Consistency]:
        """The classifier's INT8 artifact, verified, opened from the bytes that were hashed, and probed."""
        what = ref.uri
        artifact = record.build.int8(gated.get("artifact_id", gated["chosen"]))
        if not artifact.is_file():
            raise SwapRefused(
                f"{what}: the INT8 model its gates judged is missing ({artifact}); run 'modelcd gate {ref.name} {ref.version}'"
            )
        # Hashed and opened from the same bytes: a file replaced after the check is never what serves.
        artifact_bytes = artifact.read_bytes()
        checked = self._check(ref, bytes_sha256(artifact_bytes))
        step("verdict verified over the registered files, INT8 model and tokenizer")
        scan(Path(record.artifact_dir), what, self.limits)
        step("registered files scanned")
        try:
            # Gated builds record whether the graph is batch-dependent; older records make the engine read the graph.
            engine = Engine(
                artifact,
                record.build.merged,
                threads=self.threads,
                batch_dependent=gated.get("batch_dependent"),
                artifact_bytes=artifact_bytes,
            )
        except ModelcdError as e:
            raise SwapRefused(f"{what}: {e}") from e
        attested = checked.verdict.subjects
        served = Served(
            self.model, ref.version, attested[attestation.REGISTERED_FILES], attested[attestation.INT8_MODEL], gated["chosen"], engine
        )
        step("session opened")
        probe = gated["probe"]
        consistency = compare(
            served.logits(probe["texts"], int(probe["batch"])),
            np.asarray(probe["logits"], dtype=np.float32),
            self.policy.max_abs_logit_diff,
            self.policy.min_top1_agreement,
            what,
        )
        step("probed against the gated outputs")
        return served, consistency
