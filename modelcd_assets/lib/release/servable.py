"""The one reader of "may this version be served or promoted": a valid attestation over exactly the bytes about to be used.

The server's loader (the alias follower, the admin API and a request's `adapter` field alike), promotion's
compare-and-set, rollback's target search, `modelcd verdict` and `modelcd status` all ask `check`. It verifies the
version's fetched files against the signature the registry holds for that version now, the attestation's signature
with the public key, and every attested digest against the bytes on disk, and refuses a version production was rolled
back from. Anything it cannot check is a refusal, with the reason. No Dagster and no torch: the server imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from modelcd_assets.lib.errors import BadCandidate, ModelcdError, RegistryUnavailable
from modelcd_assets.lib.hashing import file_sha256, folder_hash
from modelcd_assets.lib.inference.tokens import tokenizer_hash
from modelcd_assets.lib.release import attestation
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import ROLLED_BACK, CandidateRef, Registry
from modelcd_assets.lib.tasks.names import CAUSAL_LM

NO_VERDICT = "not servable: no valid verdict"


class NotServable(ModelcdError):
    """A version without a valid verdict over these bytes: never served, promoted or rolled back to."""


@dataclass(frozen=True)
class Servable:
    """A version whose attestation covers the bytes on disk: what it was judged on and what it may serve."""

    ref: CandidateRef
    record: CandidateRecord
    verdict: attestation.Verdict
    int8: Path  # the INT8 model its gates judged, whose sha256 the attestation holds


def subjects(registry: Registry, ref: CandidateRef, record: CandidateRecord, int8_sha256: str | None = None) -> dict[str, str]:
    """The digests of what would be used for ref, hashed here: registered files (verified against the registry's signature for ref),
    the INT8 model, its tokenizer and the calibration set. int8_sha256: the INT8 bytes' hash when the caller already holds them."""
    if record.task == CAUSAL_LM:  # the INT8 base build's files, and the candidate's adapter file on it
        q = record.quantization()
        base = Path(q["base_build"]) / "int8"
        return {
            attestation.REGISTERED_FILES: registry.verify_local(ref, Path(record.artifact_dir)),
            attestation.INT8_MODEL: int8_sha256 or folder_hash(base),
            attestation.ADAPTER_FILE: file_sha256(record.build.dir / q["artifact"]),
            attestation.TOKENIZER: tokenizer_hash(base),
        }
    int8 = record.chosen_int8()
    return {
        attestation.REGISTERED_FILES: registry.verify_local(ref, Path(record.artifact_dir)),
        attestation.INT8_MODEL: int8_sha256 or file_sha256(int8),
        attestation.TOKENIZER: tokenizer_hash(record.build.merged),
        attestation.CALIBRATION_SET: record.calibration_sha256 or "",
    }


def check(
    registry: Registry, state_root: Path, ref: CandidateRef, *, int8_sha256: str | None = None, allow_rolled_back: bool = False
) -> Servable:
    """ref's verdict, if a valid attestation covers exactly the bytes that would be used; NotServable (or RegistryUnavailable) otherwise.

    int8_sha256: the hash of the INT8 model's bytes as the caller read them (the server hashes and opens the same bytes).
    """
    what = ref.uri
    try:
        record = CandidateRecord.of(state_root, ref)
        record.quantization()
    except FileNotFoundError as e:
        raise NotServable(f"{NO_VERDICT} for {what}: it has no gated build in {state_root} ({e})") from e
    try:
        tags = registry.tags(ref)
        if ROLLED_BACK in tags and not allow_rolled_back:
            raise NotServable(f"{what} is withdrawn: production was rolled back from it ({tags[ROLLED_BACK]})")
        envelope = registry.attestation(ref)
        if envelope is None:
            raise NotServable(f"{NO_VERDICT} for {what}: it has no attestation (only versions promoted through every gate get one)")
        verdict = attestation.verify(envelope, registry.keys.require_public(), what)
        actual = subjects(registry, ref, record, int8_sha256)
    except (NotServable, RegistryUnavailable):
        raise
    except BadCandidate as e:  # a bad signature over files or verdict, a changed tag
        raise NotServable(f"{NO_VERDICT} for {what}: {e}") from e
    except (ModelcdError, OSError, KeyError) as e:  # a missing key or file, an unreadable record: not checked is not servable
        raise NotServable(f"{NO_VERDICT} for {what}: it could not be checked ({type(e).__name__}: {e})") from e
    found = attestation.problems(verdict, ref.name, ref.version, actual)
    if found:
        raise NotServable(f"{NO_VERDICT} for {what}: " + "; ".join(found))
    return Servable(
        ref, record, verdict, Path(record.quantization()["base_build"]) / "int8" if record.task == CAUSAL_LM else record.chosen_int8()
    )


def reason(registry: Registry, state_root: Path, ref: CandidateRef) -> str:
    """'' when ref may be served, otherwise why not: for status tables and rollback's passed-over list."""
    try:
        check(registry, state_root, ref)
    except (NotServable, RegistryUnavailable) as e:
        return str(e)
    return ""
