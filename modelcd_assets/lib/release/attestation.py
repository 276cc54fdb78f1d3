"""A verdict is a signed statement about bytes: an in-toto Statement in a DSSE envelope, written at promotion.

Its subjects are the digests of exactly what was judged (the registered files, the INT8 model that serves, its tokenizer,
the calibration set); its predicate holds every gate's verdict, measured value and threshold, the production version and
digest it was judged against, and the effective policy's hash. Whoever asks "may this version be served or promoted"
(the server's loader, promotion's compare-and-set, rollback's target search, `modelcd verdict` and `modelcd status`)
verifies the envelope with the public key and compares the subjects with the bytes it is about to use: any difference,
or no attestation at all, is a refusal with the reason. No Dagster here: the serving process imports this module.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from modelcd_assets.lib.layout import StateLayout
from modelcd_assets.lib.release.signing import BadSignature, sign_envelope, verify_envelope

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://modelcd.dev/attestation/verdict/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
# Subject names, each a sha256: what a reader hashes itself and compares.
REGISTERED_FILES, INT8_MODEL, TOKENIZER, CALIBRATION_SET = "registered-files", "int8-model", "tokenizer", "calibration-set"
ADAPTER_FILE = "adapter-file"  # an adapter's own file, served on the INT8 model (int8-model) it was judged on
# Every subject a task may declare (lib/tasks/names.TaskDeclaration.subjects), in the order a statement lists them.
SUBJECT_NAMES = (REGISTERED_FILES, INT8_MODEL, TOKENIZER, CALIBRATION_SET, ADAPTER_FILE)
ALWAYS = (REGISTERED_FILES, INT8_MODEL)  # what every verdict is over, whatever its task
# A rollout's first verdict says the version passed its offline gates, and no more: it may take a shadow or canary share,
# never production's place. Its promotion signs another, with the live analysis of every step (predicate `rollout`).
STAGE, OFFLINE_GATES = "stage", "offline-gates"


@dataclass(frozen=True)
class Verdict:
    """What one attestation says: this version, these bytes, these gate results, judged against that production."""

    model: str
    version: str
    subjects: dict[str, str]  # subject name -> sha256 hex
    gates: list[dict]  # {"gate", "verdict", "measured", "threshold", "reason"}, in pipeline order
    judged_against: dict | None  # {"version", "registered_files"} of the production it was judged against; None for a first candidate
    policy_sha256: str
    run_id: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def offline_only(self) -> bool:
        """Whether this verdict is a rollout's first: the offline gates passed, the live steps not yet."""
        return self.extra.get(STAGE) == OFFLINE_GATES

    def predicate(self) -> dict:
        return {
            "model": self.model,
            "version": self.version,
            "promotable": True,
            "gates": self.gates,
            "judgedAgainst": self.judged_against,
            "policySha256": self.policy_sha256,
            "runId": self.run_id,
            **self.extra,
        }


def policy_sha256(policy: Mapping) -> str:
    """The effective policy's hash, as an attestation records it."""
    return hashlib.sha256(json.dumps(policy, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def statement(verdict: Verdict, subjects: tuple[str, ...]) -> dict:
    """The in-toto v1 Statement for a verdict over exactly `subjects` (its task's), validated by the in-toto attestation library."""
    from google.protobuf import json_format
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
    from in_toto_attestation.v1.statement import Statement

    if bad := [s for s in (*ALWAYS, *subjects) if s not in SUBJECT_NAMES or s not in subjects]:
        raise ValueError(f"a verdict is over {', '.join(SUBJECT_NAMES)}, always {' and '.join(ALWAYS)}; not over {subjects} ({bad})")
    required = subjects
    missing = [s for s in required if not verdict.subjects.get(s)]
    if missing:
        raise ValueError(f"a verdict on {verdict.model}/{verdict.version} needs every subject's digest; missing: {', '.join(missing)}")
    if unknown := sorted(set(verdict.subjects) - set(required)):
        raise ValueError(f"a verdict on {verdict.model}/{verdict.version} names subjects no reader hashes: {', '.join(unknown)}")
    subjects = [
        ResourceDescriptor(name=name, digest={"sha256": verdict.subjects[name]}).pb for name in SUBJECT_NAMES if name in verdict.subjects
    ]
    stmt = Statement(subjects, PREDICATE_TYPE, verdict.predicate())
    stmt.validate()
    return json_format.MessageToDict(stmt.pb)


def sign(verdict: Verdict, private_key: Path, *, subjects: tuple[str, ...]) -> dict:
    """The verdict as a signed DSSE envelope (JSON-ready), over exactly `subjects` (its task's declared ones)."""
    return sign_envelope(statement(verdict, subjects), PAYLOAD_TYPE, private_key)


def verify(envelope: Mapping, public_key: Path, what: str) -> Verdict:
    """The verdict an envelope carries, if the public key's pair signed it; BadSignature otherwise."""
    payload_type, stmt = verify_envelope(envelope, public_key, f"the attestation of {what}", "modelcd's promotion")
    if payload_type != PAYLOAD_TYPE or stmt.get("_type") != STATEMENT_TYPE or stmt.get("predicateType") != PREDICATE_TYPE:
        raise BadSignature(
            f"the attestation of {what} is not a modelcd verdict (payload {payload_type}, predicate {stmt.get('predicateType')})"
        )
    p = stmt.get("predicate") or {}
    subjects = {s.get("name"): (s.get("digest") or {}).get("sha256", "") for s in stmt.get("subject", [])}
    extra = {k: v for k, v in p.items() if k not in ("model", "version", "promotable", "gates", "judgedAgainst", "policySha256", "runId")}
    if p.get("promotable") is not True:
        raise BadSignature(f"the attestation of {what} does not say it passed its gates")
    return Verdict(
        str(p.get("model", "")),
        str(p.get("version", "")),
        subjects,
        list(p.get("gates") or []),
        p.get("judgedAgainst"),
        str(p.get("policySha256", "")),
        str(p.get("runId", "")),
        extra,
    )


def problems(verdict: Verdict, model: str, version: str, actual: Mapping[str, str]) -> list[str]:
    """Why verdict does not cover this version with these bytes (actual: subject name -> sha256 hashed by the reader); [] when it does."""
    found = []
    if (verdict.model, verdict.version) != (model, str(version)):
        found.append(f"the attestation is about {verdict.model}/{verdict.version}, not {model}/{version}")
    if not verdict.gates:
        found.append("the attestation lists no gate results")
    for name, digest in actual.items():
        attested = verdict.subjects.get(name)
        if not digest or attested != digest:
            found.append(
                f"{name} differ from what was judged (sha256 {str(digest)[:12] or 'unknown'} != attested {str(attested)[:12] or 'none'})"
            )
    return found


def local_path(state_root: Path, model: str, version: str) -> Path:
    """Where the state folder keeps a version's attestation (the registry keeps the other copy, with the version)."""
    return StateLayout(Path(state_root)).attestation(model, version)


def write_local(state_root: Path, model: str, version: str, envelope: Mapping) -> Path:
    path = local_path(state_root, model, version)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(envelope, indent=1, sort_keys=True))
    tmp.replace(path)
    return path
