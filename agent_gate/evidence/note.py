"""C2SP signed-note (c2sp.org/signed-note) with Ed25519 keys: keys as text, sign, open.

A note is text ending in a newline, a blank line, then signature lines
``— <key name> base64(key ID || signature)``. A key ID is the first four bytes of
``SHA-256(name || 0x0A || 0x01 || public key)``. The text forms of keys are those
Go's ``golang.org/x/mod/sumdb/note`` reads and writes, so a key made by
``agent-gate audit keygen`` works with the Go tools and the other way round:

* verifier key: ``<name>+<hex key ID>+base64(0x01 || 32-byte public key)``
* signer key:   ``PRIVATE+KEY+<name>+<hex key ID>+base64(0x01 || 32-byte seed)``

Opening follows the spec's rules: signatures from unknown keys are ignored; a
signature from a known key that fails rejects the whole note; a note with no verified
signature is rejected. Ed25519 is ``cryptography``'s (OpenSSL), not hand-written.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from agent_gate.errors import EvidenceError

__all__ = [
    "ED25519",
    "MAX_SIGNATURES",
    "OpenedNote",
    "SignerKey",
    "VerifierKey",
    "key_id",
    "open_note",
    "sign_note",
]

ED25519 = 0x01
"""The signature type byte of Ed25519 in signed-note."""
MAX_SIGNATURES = 100
"""Signature lines a note may carry (the spec asks verifiers to accept at least 16)."""
_DASH = "\u2014 "
_PRIVATE = "PRIVATE+KEY+"


def _check_name(name: str) -> str:
    if not name or "+" in name or any(c.isspace() or unicodedata.category(c) == "Zs"
                                      for c in name):
        raise EvidenceError(
            "a key name must be non-empty, without spaces or '+' (e.g. example.com/ledger)"
        )
    return name


def key_id(name: str, public: bytes) -> int:
    """``SHA-256(name || 0x0A || 0x01 || public)[:4]`` as a big-endian integer."""
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([ED25519]) + public).digest()
    return int.from_bytes(digest[:4], "big")


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise EvidenceError(f"{what} is not base64") from None


def _key_parts(text: str, what: str) -> tuple[str, int, bytes]:
    parts = text.strip().split("+", 2)
    if len(parts) != 3 or len(parts[1]) != 8:
        raise EvidenceError(f"{what} is not NAME+KEYID+KEY (signed-note text form)")
    name, hex_id, encoded = parts
    _check_name(name)
    try:
        number = int(hex_id, 16)
    except ValueError:
        raise EvidenceError(f"{what}'s key ID is not 8 hex digits") from None
    raw = _b64(encoded, what)
    if len(raw) != 33 or raw[0] != ED25519:
        raise EvidenceError(f"{what} is not an Ed25519 key (type 0x01, 32 bytes)")
    return name, number, raw[1:]


@dataclass(frozen=True, slots=True)
class VerifierKey:
    """A public key by name: what ``--key`` takes and a verifier trusts."""

    name: str
    id: int
    public: bytes

    @classmethod
    def parse(cls, text: str) -> VerifierKey:
        name, number, public = _key_parts(text, "the verifier key")
        if key_id(name, public) != number:
            raise EvidenceError("the verifier key's ID does not match its name and key")
        return cls(name, number, public)

    @property
    def text(self) -> str:
        encoded = base64.b64encode(bytes([ED25519]) + self.public).decode()
        return f"{self.name}+{self.id:08x}+{encoded}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


@dataclass(frozen=True, slots=True)
class SignerKey:
    """A private key by name. Its text is the key file; it is never stored in a ledger."""

    name: str
    id: int
    seed: bytes = field(repr=False)

    @classmethod
    def generate(cls, name: str) -> SignerKey:
        from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

        private = Ed25519PrivateKey.generate()
        seed = private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return cls._of(_check_name(name), seed)

    @classmethod
    def _of(cls, name: str, seed: bytes) -> SignerKey:
        public = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(
            Encoding.Raw, PublicFormat.Raw)
        return cls(name, key_id(name, public), seed)

    @classmethod
    def parse(cls, text: str) -> SignerKey:
        text = text.strip()
        if not text.startswith(_PRIVATE):
            raise EvidenceError("the signing key is not PRIVATE+KEY+NAME+KEYID+KEY")
        name, number, seed = _key_parts(text[len(_PRIVATE):], "the signing key")
        made = cls._of(name, seed)
        if made.id != number:
            raise EvidenceError("the signing key's ID does not match its name and key")
        return made

    @property
    def text(self) -> str:
        encoded = base64.b64encode(bytes([ED25519]) + self.seed).decode()
        return f"{_PRIVATE}{self.name}+{self.id:08x}+{encoded}"

    @property
    def verifier(self) -> VerifierKey:
        public = Ed25519PrivateKey.from_private_bytes(self.seed).public_key().public_bytes(
            Encoding.Raw, PublicFormat.Raw)
        return VerifierKey(self.name, self.id, public)

    def sign(self, message: bytes) -> bytes:
        return Ed25519PrivateKey.from_private_bytes(self.seed).sign(message)


def _check_text(text: str, what: str) -> None:
    if not text.endswith("\n"):
        raise EvidenceError(f"{what} must end with a newline")
    for offset, char in enumerate(text):
        if (char < " " and char != "\n") or char == "\x7f":
            raise EvidenceError(f"{what} holds a control character at offset {offset}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise EvidenceError(f"{what} is not valid UTF-8") from None


def sign_note(text: str, *signers: SignerKey) -> str:
    """``text`` signed by each of ``signers``: the note, ready to publish."""
    _check_text(text, "a note's text")
    lines = []
    for signer in signers:
        signature = signer.id.to_bytes(4, "big") + signer.sign(text.encode("utf-8"))
        lines.append(f"{_DASH}{signer.name} {base64.b64encode(signature).decode()}\n")
    return text + "\n" + "".join(lines)


@dataclass(frozen=True, slots=True)
class OpenedNote:
    """A note whose text is vouched for by ``signed_by`` (names of verified keys)."""

    text: str
    signed_by: tuple[str, ...]
    unknown: int
    """Signature lines from keys the verifier does not know (ignored, as the spec says)."""


def open_note(note: str, verifiers: Iterable[VerifierKey]) -> OpenedNote:
    """The note's text, if a known key signed it and no known key's signature fails;
    else ``EvidenceError`` naming why (never the note's text)."""
    if not isinstance(note, str):
        raise EvidenceError("a signed note must be text")
    split = note.rfind("\n\n")
    if split < 0:
        raise EvidenceError("the note has no blank line before its signatures")
    text, block = note[:split + 1], note[split + 2:]
    _check_text(text, "the note's text")
    if not block.endswith("\n"):
        raise EvidenceError("the note's signature lines must end with a newline")
    known = {(v.name, v.id): v for v in verifiers}
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise EvidenceError(f"the note has more than {MAX_SIGNATURES} signatures")
    signed: list[str] = []
    unknown = 0
    for number, line in enumerate(lines, start=1):
        if not line.startswith(_DASH) or line.count(" ") != 2:
            raise EvidenceError(f"signature line {number} is not '— NAME SIGNATURE'")
        name, encoded = line[len(_DASH):].split(" ")
        _check_name(name)
        raw = _b64(encoded, f"signature line {number}")
        if len(raw) < 5:
            raise EvidenceError(f"signature line {number} is too short")
        verifier = known.get((name, int.from_bytes(raw[:4], "big")))
        if verifier is None:
            unknown += 1
            continue
        if not verifier.verify(text.encode("utf-8"), raw[4:]):
            raise EvidenceError(
                f"the signature of {name} (line {number}) does not verify: the note was "
                "altered or signed by another key"
            )
        signed.append(name)
    if not signed:
        raise EvidenceError("the note has no signature from the given key")
    return OpenedNote(text, tuple(signed), unknown)
