"""What the ledger keeps of a tool's result: always something, never a secret.

When a result reaches the ledger the tool has already done its write. If storing
the result failed (a NaN, a lone surrogate, bytes that are not UTF-8, an object
whose ``__str__`` raises, an integer too long to print, nesting too deep), the call
would stay ``executing`` and recovery would run a retry-safe tool again: the side
effect repeated because its result was odd. So ``keep_result`` never fails: a
result that has no stored JSON form is kept as a stand-in (its type, size and a
digest) and the call still ``succeeded``, with reason code ``result_unstorable``.

A result is also the tool's own words about its arguments. Before it is stored or
shown to the model, the fields a policy names under ``redact_result`` become
stand-ins (``privacy.redaction.redact_result``) and every string is cut of the call's
redacted argument values and their pieces (``scrub.SecretScrubber``); the same
scrubber cleans the stored error (``scrub.describe_error``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from agent_gate.plainjson import canonical_json, sha256_hex
from agent_gate.policy.paths import iter_matches
from agent_gate.policy.redaction import RedactionRule
from agent_gate.privacy.redaction import redact_result, scrub_strings
from agent_gate.privacy.scrub import SecretScrubber, bound, safe_text, string_values

__all__ = ["RESULT_UNSTORABLE", "KeptResult", "OutcomeScrub", "StoredResult", "keep_result",
           "to_jsonable"]

RESULT_UNSTORABLE: Final = "result_unstorable"
"""Reason code (and stand-in key) of a success whose result has no stored form."""


@dataclass(frozen=True, slots=True)
class StoredResult:
    """A tool result as the ledger keeps it: JSON text, or only its hash when too big."""

    text: str | None
    sha256: str
    size: int

    @classmethod
    def encode(cls, value: Any, max_bytes: int) -> StoredResult:
        text = canonical_json(value)
        size = len(text.encode("utf-8"))
        return cls(text if size <= max_bytes else None, sha256_hex(text), size)


def to_jsonable(value: Any) -> Any:
    """Turn a tool's return value into plain JSON data for storage and replay.

    Pydantic models, dataclasses, dates and the like become what their JSON form
    is; anything without a JSON form becomes its ``str``. A value that still has no
    JSON form (nested deeper than serializers go, a cycle, a ``__str__`` that raises)
    raises: ``keep_result`` turns that into a stored stand-in,
    so the call still ends ``succeeded`` (one rule for every unstorable result).
    """
    # Imported here: the ledger's readers (``agent-gate tasks``) never store a result,
    # and pydantic is a good part of their start-up.
    from pydantic import BaseModel
    from pydantic_core import to_jsonable_python

    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return to_jsonable_python(value, fallback=str)


@dataclass(frozen=True, slots=True)
class OutcomeScrub:
    """One call's redaction, applied to what its tool returned or raised."""

    values: tuple[str, ...]
    """The call's redacted argument values (strings, long numbers written out)."""
    secrets: SecretScrubber
    result_rules: tuple[RedactionRule, ...]
    key: bytes | None
    """The seal key's digest key: stand-ins get keyed digests, as argument ones do."""

    @classmethod
    def build(
        cls,
        arguments: Mapping[str, Any] | None,
        argument_rules: Iterable[RedactionRule],
        result_rules: Iterable[RedactionRule],
        *,
        key: bytes | None,
    ) -> OutcomeScrub | None:
        """The scrub for a call with these (clear) arguments; None when nothing is redacted."""
        argument_rules, result_rules = tuple(argument_rules), tuple(result_rules)
        if not argument_rules and not result_rules:
            return None
        clear = dict(arguments) if arguments is not None else {}
        values: list[str] = []
        for rule in argument_rules:
            for container, slot in iter_matches(clear, rule.path):
                values.extend(string_values([container[slot]]))
        secrets = SecretScrubber(values)
        if not secrets and not result_rules:
            return None  # the redacted fields were not sent: nothing to look for
        return cls(tuple(values), secrets, result_rules, key)

    def result(self, value: Any) -> Any:
        """A JSON result as it may be stored and shown: stand-ins at the result paths,
        every string (and key) scrubbed of the call's redacted values and of theirs."""
        redacted, found = redact_result(value, self.result_rules, key=self.key)
        secrets = self.secrets
        if found:
            secrets = SecretScrubber([*self.values, *string_values(found)])
        return scrub_strings(redacted, secrets.scrub)

    def digest(self, data: bytes) -> str | None:
        """A digest of raw result bytes that cannot be used to confirm a guess of a
        redacted value: keyed when there is a key, else none at all."""
        if self.key is None:
            return None
        return "hmac-sha256:" + hmac.new(self.key, data, hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class KeptResult:
    """A result as stored, and as the outcome reports it now."""

    value: Any
    """Plain JSON, scrubbed; the stand-in when the result had no stored form; None
    when the call redacts anything and the result is over the size the ledger keeps."""
    stored: StoredResult
    code: str | None = None
    reason: str | None = None


def keep_result(raw: Any, max_bytes: int, scrub: OutcomeScrub | None = None) -> KeptResult:
    """The form of a tool's return value the ledger stores; never raises.

    Anything the conversion to JSON, the scrubbing or the encoding to UTF-8 refuses
    becomes ``unstorable(raw)``: the tool's code may raise from ``__str__`` or
    ``model_dump``, so every exception is caught, not a list of known ones.
    """
    try:
        value = to_jsonable(raw)
        if scrub is not None:
            clear = StoredResult.encode(value, max_bytes)
            if clear.text is None:
                # Too large to keep, so kept as a hash; too large to scrub within the
                # call's lease too, so not shown to the model either (None: omitted).
                return KeptResult(None, clear)
            value = scrub.result(value)
        return KeptResult(value, StoredResult.encode(value, max_bytes))
    except Exception:
        stand_in = unstorable(raw, scrub)
        kind = stand_in[RESULT_UNSTORABLE]["type"]
        return KeptResult(
            stand_in,
            StoredResult.encode(stand_in, max_bytes),
            RESULT_UNSTORABLE,
            f"the tool succeeded; its result (a {kind}) has no JSON form that can be "
            "stored, so only its type, size and digest are kept",
        )


def unstorable(raw: Any, scrub: OutcomeScrub | None = None) -> dict[str, Any]:
    """``{"result_unstorable": {"type", "size", "sha256"}}`` for a result with no stored
    form. ``size`` counts characters of a string, bytes of bytes, items of a container
    (None when unknown); the digest is of a string's or bytes' content only, keyed
    when the call redacts anything (and left out if there is no key to do that)."""
    kind = safe_text(bound(type(raw).__name__, 120))
    if scrub is not None:
        kind = scrub.secrets.scrub(kind)
    size: int | None = None
    data: bytes | None = None
    if isinstance(raw, str):
        size, data = len(raw), raw.encode("utf-8", "surrogatepass")
    elif isinstance(raw, bytes | bytearray | memoryview):
        data = bytes(raw)
        size = len(data)
    else:
        try:
            size = len(raw)
        except Exception:
            size = None
    digest: str | None = None
    if data is not None:
        digest = "sha256:" + hashlib.sha256(data).hexdigest() if scrub is None else (
            scrub.digest(data)
        )
    return {RESULT_UNSTORABLE: {"type": kind, "size": size, "sha256": digest}}
