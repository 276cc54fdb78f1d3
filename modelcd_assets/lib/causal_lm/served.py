"""What a causal-LM adapter version serves (lib/tasks/names.TaskDeclaration.served): the weights of the base build its gates
judged (a folder: the weight variant quantized_model chose), the adapter file built for it, and the build's tokenizer.
Weight-only variants have no calibration set. Torch-free: the server reads it."""

from __future__ import annotations

from pathlib import Path

from modelcd_assets.lib.causal_lm.variants import INT8, variant_named
from modelcd_assets.lib.hashing import file_sha256, folder_hash
from modelcd_assets.lib.inference.tokens import tokenizer_hash
from modelcd_assets.lib.release import attestation
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.servable import ServedFiles


def lm_served(record: CandidateRecord) -> ServedFiles:
    gated = record.quantization()
    base = Path(gated["base_build"]) / variant_named(gated.get("variant", INT8.name)).name
    adapter = record.build.dir / gated["artifact"]
    return ServedFiles(
        {attestation.INT8_MODEL: base, attestation.ADAPTER_FILE: adapter},
        {
            attestation.INT8_MODEL: lambda: folder_hash(base),
            attestation.ADAPTER_FILE: lambda: file_sha256(adapter),
            attestation.TOKENIZER: lambda: tokenizer_hash(base),
        },
    )
