"""Pure HTTP judgements: media types, error bodies, retry hints.

No I/O here: each function takes what the I/O layer already read (a header
value, at most a bounded prefix of a body) and returns a decision, so every
rule is tested without a socket.
"""

from __future__ import annotations

import email.utils
import json
import math
import re
import time
from collections.abc import Mapping
from typing import Any

EVENT_STREAM = "text/event-stream"

# RFC 9110 section 5.6.2: token = 1*tchar
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_MEDIA_TYPE = re.compile(rf"\s*({_TOKEN})/({_TOKEN})\s*(?:;.*)?", re.DOTALL)


def media_type(content_type: str | None) -> str:
    """The ``type/subtype`` of a Content-Type value, lower-cased; ``""`` if malformed.

    Parameters (``charset``...) are allowed and ignored. A media type cannot
    contain ``;`` or quotes, so everything after the first ``;`` is parameters.
    Substring checks are wrong here: ``application/json, text/event-stream`` is
    not an event stream (httpx-sse accepts it) and neither is
    ``text/event-stream-v2``.
    """
    if not content_type:
        return ""
    match = _MEDIA_TYPE.fullmatch(content_type)
    if match is None:
        return ""
    return f"{match.group(1)}/{match.group(2)}".lower()


def is_event_stream(content_type: str | None) -> bool:
    return media_type(content_type) == EVENT_STREAM


def shown_media_type(content_type: str | None, limit: int = 64) -> str:
    """A Content-Type fit for an error message: the media type only, bounded."""
    parsed = media_type(content_type)
    if parsed:
        return parsed[:limit]
    if not content_type:
        return ""
    return "(malformed)"


# -- redaction ---------------------------------------------------------------

REDACTED = "[REDACTED]"

_SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    # first, so that "Authorization: Bearer x" loses x, not just the word Bearer
    re.compile(r"(?i)\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=\-]+"),
    # key=value or "key": "value" where the key names a credential
    re.compile(
        r"(?i)((?:api[_-]?key|access[_-]?token|refresh[_-]?token|token|secret|password|passwd"
        r"|authorization|x-api-key|session)[\"']?\s*[:=]\s*[\"']?)([^\s\"',;}&]+)"
    ),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"),  # OpenAI, Anthropic (sk-ant-...)
    re.compile(r"\bAIza[0-9A-Za-z_\-]{20,}"),  # Google API keys
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),  # GitHub tokens
    re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),  # Slack tokens
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\beyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"),  # JWTs
)
# Anything long, unbroken and mixing letters and digits reads as a credential,
# except provider request ids, which exist to be quoted to support.
_LONG_TOKEN = re.compile(r"(?<![A-Za-z0-9_\-])[A-Za-z0-9_\-+/=]{24,}(?![A-Za-z0-9_\-])")
_SAFE_PREFIXES = ("req_", "request_")


def _redact_long(match: re.Match[str]) -> str:
    text = match.group(0)
    if text.startswith(_SAFE_PREFIXES):
        return text
    has_digit = any(c.isdigit() for c in text)
    has_alpha = any(c.isalpha() for c in text)
    return REDACTED if has_digit and has_alpha else text


def redact(text: str) -> str:
    """Replace everything in ``text`` that looks like a key, token or password."""
    out = text
    for pattern in _SECRET_PATTERNS:
        if pattern.groups >= 2:
            out = pattern.sub(lambda m: m.group(1) + REDACTED, out)
        else:
            out = pattern.sub(REDACTED, out)
    return _LONG_TOKEN.sub(_redact_long, out)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())  # no newlines in a log line
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


def _str_field(obj: Mapping[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def error_excerpt(
    body: bytes, *, truncated: bool, max_chars: int = 300, max_message_chars: int = 160
) -> tuple[str, str | None]:
    """A bounded, redacted summary of an error body and the provider's error type.

    Providers send errors as JSON: OpenAI ``{"error": {"message", "type",
    "code"}}``, Anthropic ``{"type": "error", "error": {"type", "message"},
    "request_id"}``, Gemini ``{"error": {"code", "message", "status"}}``. Only
    those fields are quoted, each clipped and redacted; a body that is not JSON
    (an HTML error page from a proxy, say) is described by its size, never
    quoted, since nothing says what it contains.
    """
    size = f"{len(body)}{'+' if truncated else ''} bytes"
    try:
        parsed = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return f"non-JSON error body ({size})", None
    if not isinstance(parsed, dict):
        return f"JSON error body without an error object ({size})", None
    err: Any = parsed.get("error", parsed)
    parts: list[str] = []
    error_type: str | None = None
    if isinstance(err, str):
        parts.append("message=" + repr(_clip(redact(err), max_message_chars)))
    elif isinstance(err, dict):
        for key in ("type", "code", "status"):
            value = _str_field(err, key)
            if value is None:
                continue
            value = _clip(redact(value), 64)
            parts.append(f"{key}={value}")
            # A numeric code (Gemini repeats the HTTP status) names no error type.
            if error_type is None and not value.isdigit():
                error_type = value
        message = _str_field(err, "message")
        if message is not None:
            parts.append("message=" + repr(_clip(redact(message), max_message_chars)))
    request_id = _str_field(parsed, "request_id")
    if request_id is not None:
        parts.append("request_id=" + _clip(redact(request_id), 64))
    if not parts:
        return f"JSON error body without a recognized error object ({size})", None
    return _clip(" ".join(parts), max_chars), error_type


# -- retry hints -------------------------------------------------------------


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds the server asked to wait (``retry-after-ms``, ``retry-after``), if any.

    ``retry-after`` may be a number of seconds or an HTTP date; a value that is
    neither, negative, or not finite is ignored rather than trusted.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = lowered.get(name)
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            continue
        if math.isfinite(value) and value >= 0:
            return value / divisor
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    wall = time.time() if now is None else now
    return max(when.timestamp() - wall, 0.0)


RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


def is_retryable(status: int, headers: Mapping[str, str]) -> bool:
    """Whether a retry layer may send the request again (the transport never does).

    ``x-should-retry`` (sent by OpenAI and Anthropic) overrides the status, as
    the official SDKs do.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    hint = lowered.get("x-should-retry", "").strip().lower()
    if hint == "true":
        return True
    if hint == "false":
        return False
    return status in RETRYABLE_STATUSES or status >= 500
