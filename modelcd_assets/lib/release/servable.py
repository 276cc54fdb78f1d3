"""The one reader of "may this version be served or promoted": a valid attestation over exactly the bytes about to be used.

The server's loader (the alias follower, the admin API and a request's `adapter` field alike), promotion's
compare-and-set, rollback's target search, `modelcd verdict` and `modelcd status` all ask `check`. It verifies the
version's fetched files against the signature the registry holds for that version now, the attestation's signature
with the public key, and every attested digest against the bytes on disk, and refuses a version production was rolled
back from. Anything it cannot check is a refusal, with the reason. No Dagster and no torch: the server imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from modelcd_assets.lib.errors import BadCandidate, ModelcdError, RegistryUnavailable
from modelcd_assets.lib.release import attestation
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import ROLLED_BACK, CandidateRef, Registry
from modelcd_assets.lib.tasks.names import declaration_of, load_declared

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


@dataclass(frozen=True)
class ServedFiles:
    """What a version serves, as its task's `served` function (lib/tasks/names.TaskDeclaration.served) finds it: the path of each
    subject that is a file or folder on disk (always the INT8 model), and how to hash every subject of its attestation but the
    registered files (which the registry's signature covers). Nothing is hashed until digests() is asked."""

    paths: dict[str, Path]
    hashers: dict[str, Callable[[], str]]

    @property
    def int8(self) -> Path:
        return self.paths[attestation.INT8_MODEL]

    def digests(self, int8_sha256: str | None = None) -> dict[str, str]:
        """Each subject's sha256; int8_sha256: the INT8 model's, when the caller already hashed the bytes it opened."""
        return {name: int8_sha256 if name == attestation.INT8_MODEL and int8_sha256 else h() for name, h in self.hashers.items()}


def served_files(record: CandidateRecord) -> ServedFiles:
    """What record's version serves, by its task's declaration."""
    declared = declaration_of(record.task)
    found = load_declared(declared.served, f"task {record.task!r}'s served files")(record)
    expected = set(declared.subjects) - {attestation.REGISTERED_FILES}
    if set(found.hashers) != expected or attestation.INT8_MODEL not in found.paths:
        raise ModelcdError(
            f"task {record.task!r}'s {declared.served} gave {sorted(found.hashers)} and paths {sorted(found.paths)}, not the subjects "
            f"it declares ({sorted(expected)}, with the INT8 model's path)"
        )
    return found


def subjects(
    registry: Registry, ref: CandidateRef, record: CandidateRecord, int8_sha256: str | None = None, served: ServedFiles | None = None
) -> dict[str, str]:
    """The digests of what would be used for ref, hashed here: registered files (verified against the registry's signature for
    ref), and what its task serves (served: served_files(record), when the caller already has it). int8_sha256: the INT8
    bytes' hash when the caller already holds them."""
    return {
        attestation.REGISTERED_FILES: registry.verify_local(ref, Path(record.artifact_dir)),
        **(served or served_files(record)).digests(int8_sha256),
    }


def check(
    registry: Registry,
    state_root: Path,
    ref: CandidateRef,
    *,
    int8_sha256: str | None = None,
    allow_rolled_back: bool = False,
    production: bool = False,
) -> Servable:
    """ref's verdict, if a valid attestation covers exactly the bytes that would be used; NotServable (or RegistryUnavailable) otherwise.

    int8_sha256: the hash of the INT8 model's bytes as the caller read them (the server hashes and opens the same bytes).
    production: ref would be production (a rollback's target): a rollout's first verdict (its offline gates only) is refused.
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
        served = served_files(record)
        actual = subjects(registry, ref, record, int8_sha256, served)
    except (NotServable, RegistryUnavailable):
        raise
    except BadCandidate as e:  # a bad signature over files or verdict, a changed tag
        raise NotServable(f"{NO_VERDICT} for {what}: {e}") from e
    except (ModelcdError, OSError, KeyError) as e:  # a missing key or file, an unreadable record: not checked is not servable
        raise NotServable(f"{NO_VERDICT} for {what}: it could not be checked ({type(e).__name__}: {e})") from e
    found = attestation.problems(verdict, ref.name, ref.version, actual)
    if found:
        raise NotServable(f"{NO_VERDICT} for {what}: " + "; ".join(found))
    if production and verdict.offline_only:
        raise NotServable(
            f"{what} passed its offline gates only: it is rolled out, and takes production's place only once its rollout promotes it"
        )
    return Servable(ref, record, verdict, served.int8)


def reason(registry: Registry, state_root: Path, ref: CandidateRef, production: bool = False) -> str:
    """'' when ref may be served (production: as production), otherwise why not: for status tables and rollback's passed-over list."""
    try:
        check(registry, state_root, ref, production=production)
    except (NotServable, RegistryUnavailable) as e:
        return str(e)
    return ""
