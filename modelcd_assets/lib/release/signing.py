"""Keys, and signatures over a registered folder: OpenSSF model-signing with an elliptic-curve key, no network.

A registered version's folder is signed when it is registered; its signature covers every file's sha256 (dotfiles
included). Every fetch and every load verifies it with the public key before anything in the folder is read, so a file
changed or added by anyone without the private key is refused, with its name. The private key stays with whoever
registers, gates and promotes (on Kubernetes: the run pods); serving needs only the public key.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from modelcd_assets.lib.errors import BadCandidate, ModelcdError

SIGNING_KEY_ENV, VERIFY_KEY_ENV = "MODELCD_SIGNING_KEY", "MODELCD_VERIFY_KEY"
KEYS_DIR = "keys"
PRIVATE_FILE, PUBLIC_FILE = "signing.key", "signing.pub"
SIGNATURE_FILE = "modelcd_model.sig"  # the registered folder's signature, a registry artifact beside the folder


class BadSignature(BadCandidate):
    """A signature or attestation that does not verify: files changed, another key, or none at all."""


class FilesChanged(BadSignature):
    """Files that do not match the signature made over them at registration: changed since."""


class MissingKey(ModelcdError):
    """The key a step needs is not where the environment says."""


@dataclass(frozen=True)
class Keys:
    """Where the signing key pair lives; either half may be absent (serving holds only the public key)."""

    private: Path
    public: Path

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Keys":
        """MODELCD_SIGNING_KEY and MODELCD_VERIFY_KEY, defaulting to $MODELCD_HOME/keys/signing.{key,pub}."""
        env = os.environ if environ is None else environ
        home = Path(env.get("MODELCD_HOME", ".modelcd")).resolve()
        return cls(
            Path(env.get(SIGNING_KEY_ENV) or home / KEYS_DIR / PRIVATE_FILE), Path(env.get(VERIFY_KEY_ENV) or home / KEYS_DIR / PUBLIC_FILE)
        )

    def require_private(self) -> Path:
        if not self.private.is_file():
            raise MissingKey(
                f"no signing key at {self.private}: registering and promoting sign what they record; create a key pair with "
                f"'modelcd keys init' (or point {SIGNING_KEY_ENV} at your private key)"
            )
        return self.private

    def require_public(self) -> Path:
        if not self.public.is_file():
            raise MissingKey(
                f"no public key at {self.public}: nothing can be verified, so nothing is fetched, served or promoted; "
                f"point {VERIFY_KEY_ENV} at the public half of the signing key ('modelcd keys init' makes a pair)"
            )
        return self.public


def init_keys(keys: Keys, *, force: bool = False) -> Keys:
    """Make an EC P-256 key pair: the private key 0600 in a 0700 folder, the public key beside it."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    if keys.private.exists() and not force:
        raise ModelcdError(
            f"a signing key already exists at {keys.private}; every signature and verdict made with it would stop "
            "verifying under a new one: keep it, or pass --force to replace it"
        )
    for path in (keys.private, keys.public):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(keys.private.parent, 0o700)
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(keys.private, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    os.chmod(keys.private, 0o600)
    keys.public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return keys


def _hashing():
    from model_signing import hashing

    # Every file counts: model-signing leaves .gitignore and .git/ out by default, which would leave them unsigned.
    return hashing.Config().set_ignored_paths(paths=[], ignore_git_paths=False)


def sign_folder(folder: Path, private_key: Path, signature: Path) -> Path:
    """Sign every file in folder; the signature (a Sigstore bundle) is written to signature, outside the folder."""
    from model_signing import signing

    signing.Config().set_hashing_config(_hashing()).use_elliptic_key_signer(private_key=str(private_key)).sign(
        Path(folder), Path(signature)
    )
    return Path(signature)


def _readable(message: str) -> str:
    """model-signing's mismatch message, without the digests' byte reprs: which files, and how."""
    return re.sub(r": Expected 'Digest\(.*?\)', Actual 'Digest\(.*?\)'", " (contents changed)", message)


def verify_folder(folder: Path, public_key: Path, signature: Path, what: str) -> None:
    """Raise BadSignature, naming the files, unless signature was made by public_key's pair over exactly folder's files."""
    from model_signing import verifying

    if not Path(signature).is_file():
        raise BadSignature(
            f"{what} has no signature ({signature} is missing): it was registered unsigned or its signature was removed; "
            "re-register it with 'modelcd register' (which signs)"
        )
    try:
        verifying.Config().set_hashing_config(_hashing()).use_elliptic_key_verifier(public_key=str(public_key)).verify(
            Path(folder), Path(signature)
        )
    except ValueError as e:
        if "Key mismatch" in str(e):
            raise BadSignature(
                f"{what}: its signature was made with another key than the public key {public_key}; refusing it. "
                "Only what modelcd registered with its own signing key is used"
            ) from e
        raise FilesChanged(
            f"{what}: its files do not match their signature: {_readable(str(e))}; refusing it. Files changed after "
            "registration are never used: re-register the artifact"
        ) from e
    except Exception as e:  # a malformed bundle, a signature by another key, an unreadable file
        raise BadSignature(
            f"{what}: its signature does not verify with the public key {public_key} ({type(e).__name__}: {e}); refusing it"
        ) from e


def sign_envelope(payload: Mapping, payload_type: str, private_key: Path) -> dict:
    """payload as a DSSE envelope (JSON-ready) signed with the private key: what verdicts and rollout states are stored as."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner

    body = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    envelope = Envelope(payload=body, payload_type=payload_type, signatures={})
    envelope.sign(CryptoSigner(load_pem_private_key(Path(private_key).read_bytes(), password=None)))
    return envelope.to_dict()


def verify_envelope(envelope: Mapping, public_key: Path, what: str, writer: str) -> tuple[str, dict]:
    """The payload type and JSON payload of a DSSE envelope the public key's pair signed; BadSignature naming `what` and
    who should have written it otherwise."""
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey

    try:
        env = Envelope.from_dict(dict(envelope))
        env.verify([SSlibKey.from_crypto(load_pem_public_key(Path(public_key).read_bytes()))], 1)
        payload = json.loads(env.payload)
    except Exception as e:  # a forged, altered or malformed envelope, or one signed with another key
        raise BadSignature(
            f"{what} does not verify with the public key {public_key} ({type(e).__name__}: {e}); "
            f"it was not written by {writer} with this key: refusing it"
        ) from e
    if not isinstance(payload, dict):
        raise BadSignature(f"{what} carries no JSON object: refusing it")
    return env.payload_type, payload
