"""Keeping redacted argument fields out of the database file, yet resumable.

The policy names argument fields that the audit trail may keep only as a digest and
a short preview (``policy.redact``). The ledger must still be able to run such a
call later without the stream (after an approval, after a crash), so it needs the
values somewhere. The decision: ``tool_calls.arguments`` holds the *redacted*
form, and the full arguments are stored **sealed** in ``sealed_arguments``:
AES-256-GCM under a key the operator provides, bound (as associated data) to the
row's task, call id and argument hash, so a sealed blob cannot be moved to another
row. Whoever holds only the database file (a backup, a copy, a support bundle)
sees stand-ins, digests and ciphertext, never the values.

With the key come keyed digests: the stand-ins' digests and the row's argument
hash are HMAC-SHA256 under subkeys of the seal key, so short values (an amount,
the last four digits of a card) cannot be recovered by hashing guesses.

Where the key comes from (``resolve``), first match wins:

1. ``seal_key=`` given to ``Gate`` (32 raw bytes, or a path to a key file);
2. ``$AGENT_GATE_SEAL_KEY``: 32 bytes, base64 or hex;
3. ``$AGENT_GATE_SEAL_KEY_FILE``: a file holding such a key;
4. for a SQLite ledger file ``X.db``, the file ``X.db.key`` beside it, created
   (mode 0600) the first time a call needs sealing. It keeps the embedded default
   working out of the box and the values out of the database file; keep the key
   file out of the backups of the database.

A key file (3, 4, or a path given as ``seal_key=``) must be a regular file owned by
the user running the gate, with no permission for group or others (``chmod 600``);
any other is refused (``SealKeyUnsafe``), as ``ssh`` refuses a private key others
can read.

A PostgreSQL ledger has no place beside it: every worker must be given the same
key (2 or 3), or a gate whose policy redacts fields refuses to start
(``SealKeyMissing``). A process without the key can still audit, approve and
deny, but cannot run a sealed call (it is reported, never run with stand-ins).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
import shlex
import stat
from pathlib import Path

from sqlalchemy.engine import make_url

from agent_gate.errors import SealError, SealKeyMissing, SealKeyUnsafe

__all__ = [
    "ENV_KEY",
    "ENV_KEY_FILE",
    "KEY_BYTES",
    "SealError",
    "SealKey",
    "SealKeyMissing",
    "SealKeyUnsafe",
    "default_key_path",
    "resolve",
]

ENV_KEY = "AGENT_GATE_SEAL_KEY"
ENV_KEY_FILE = "AGENT_GATE_SEAL_KEY_FILE"
KEY_BYTES = 32
_PREFIX = "v1:"
_NONCE_BYTES = 12








def _parse_key(text: str, source: str) -> bytes:
    text = text.strip()
    for decode in (bytes.fromhex, base64.urlsafe_b64decode, base64.b64decode):
        try:
            raw = decode(text)
        except (ValueError, binascii.Error):
            continue
        if len(raw) == KEY_BYTES:
            return raw
    raise SealKeyMissing(f"{source} does not hold a {KEY_BYTES}-byte key (hex or base64)")


class SealKey:
    """An operator's secret: seals argument values and keys their digests."""

    def __init__(self, key: bytes, *, source: str = "<key>") -> None:
        if len(key) != KEY_BYTES:
            raise SealKeyMissing(f"a seal key is {KEY_BYTES} bytes, got {len(key)}")
        self._key = key
        self.source = source
        self.digest_key = self._sub(b"agent-gate redaction digest v1")
        self._hash_key = self._sub(b"agent-gate argument hash v1")
        self.key_id = self._sub(b"agent-gate key id v1").hex()[:12]

    def _sub(self, label: bytes) -> bytes:
        return hmac.new(self._key, label, hashlib.sha256).digest()

    def __repr__(self) -> str:
        return f"SealKey(id={self.key_id}, source={self.source!r})"

    @classmethod
    def generate(cls) -> SealKey:
        return cls(secrets.token_bytes(KEY_BYTES), source="<generated>")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> SealKey:
        """The key in ``path``, refused unless only its owner, this user, can touch it."""
        name = os.fspath(path)
        try:
            # Checked on the open file, not the path: a swap between check and read
            # cannot slip another file in. A symlink is followed (secret mounts are
            # links); the file it reaches is what must be private.
            fd = os.open(name, os.O_RDONLY)
        except OSError as exc:
            raise SealKeyMissing(f"cannot read the seal key file {name!r}: "
                                 f"{type(exc).__name__}") from None
        try:
            _check_private(name, os.fstat(fd))
            with os.fdopen(fd, "rb", closefd=False) as handle:
                raw = handle.read(4096)
        finally:
            os.close(fd)
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            raise SealKeyMissing(f"cannot read the seal key file {name!r}: "
                                 "UnicodeDecodeError") from None
        return cls(_parse_key(text, f"seal key file {name!r}"), source=name)

    def keyed_hash(self, data: str) -> str:
        """HMAC-SHA256 (hex) of argument text: the argument hash of a sealed call."""
        return hmac.new(self._hash_key, data.encode("utf-8"), hashlib.sha256).hexdigest()

    def seal(self, plaintext: str, *, bound_to: str) -> str:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = secrets.token_bytes(_NONCE_BYTES)
        box = AESGCM(self._key).encrypt(nonce, plaintext.encode("utf-8"), bound_to.encode())
        return f"{_PREFIX}{self.key_id}:" + base64.b64encode(nonce + box).decode("ascii")

    def open(self, token: str, *, bound_to: str) -> str:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        try:
            version, key_id, body = token.split(":", 2)
        except ValueError:
            raise SealError("not a sealed value") from None
        if f"{version}:" != _PREFIX:
            raise SealError(f"unknown sealing format {version!r}")
        if key_id != self.key_id:
            raise SealError(f"sealed under key {key_id}, this process has key {self.key_id}")
        try:
            raw = base64.b64decode(body, validate=True)
            data = AESGCM(self._key).decrypt(
                raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], bound_to.encode()
            )
        except (binascii.Error, InvalidTag, ValueError):
            raise SealError("the sealed value was altered or belongs to another call") from None
        return data.decode("utf-8")


def _check_private(name: str, info: os.stat_result) -> None:
    """Refuse a key file that is not a regular file owned by this user, mode 0600 or less.

    Does nothing where POSIX ownership and modes do not exist (Windows).
    """
    if os.name != "posix":
        return
    if not stat.S_ISREG(info.st_mode):
        raise SealKeyUnsafe(f"seal key file {name!r} is not a regular file")
    uid = os.geteuid()
    if info.st_uid != uid:
        raise SealKeyUnsafe(
            f"seal key file {name!r} is owned by uid {info.st_uid}, not by this user "
            f"(uid {uid}): a key someone else can replace is refused; fix: "
            f"chown {uid} {shlex.quote(name)} && chmod 600 {shlex.quote(name)}"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise SealKeyUnsafe(
            f"seal key file {name!r} has mode {mode:04o}: readable or writable by "
            f"group or others, who could open every sealed argument; fix: "
            f"chmod 600 {shlex.quote(name)}"
        )


def default_key_path(db_url: str) -> Path | None:
    """``X.db.key`` beside a SQLite ledger file; None for other databases."""
    url = make_url(db_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database + ".key")


def _create_key_file(path: Path) -> SealKey:
    key = SealKey.generate()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return SealKey.from_file(path)  # another process created it first
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(key._key.hex() + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return SealKey.from_file(path)


def resolve(
    explicit: SealKey | bytes | str | os.PathLike[str] | None,
    db_url: str,
    *,
    create: bool = False,
) -> SealKey | None:
    """The seal key to use, by the precedence in the module docstring.

    ``create`` makes the SQLite default key file when no other key is configured.
    """
    if isinstance(explicit, SealKey):
        return explicit
    if isinstance(explicit, bytes):
        return SealKey(explicit, source="seal_key=")
    if explicit is not None:
        return SealKey.from_file(explicit)
    env = os.environ.get(ENV_KEY)
    if env:
        return SealKey(_parse_key(env, f"${ENV_KEY}"), source=f"${ENV_KEY}")
    env_file = os.environ.get(ENV_KEY_FILE)
    if env_file:
        return SealKey.from_file(env_file)
    path = default_key_path(db_url)
    if path is None:
        return None
    if path.exists():
        return SealKey.from_file(path)
    return _create_key_file(path) if create else None
