"""What a classifier version serves (lib/tasks/names.TaskDeclaration.served): its chosen INT8 model file, the tokenizer of its
merged folder, and the calibration set that INT8 model was calibrated with. Torch-free: the server reads it."""

from __future__ import annotations

from modelcd_assets.lib.hashing import file_sha256
from modelcd_assets.lib.inference.tokens import tokenizer_hash
from modelcd_assets.lib.release import attestation
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.servable import ServedFiles


def classifier_served(record: CandidateRecord) -> ServedFiles:
    int8 = record.chosen_int8()
    return ServedFiles(
        {attestation.INT8_MODEL: int8},
        {
            attestation.INT8_MODEL: lambda: file_sha256(int8),
            attestation.TOKENIZER: lambda: tokenizer_hash(record.build.merged),
            attestation.CALIBRATION_SET: lambda: record.calibration_sha256 or "",
        },
    )
