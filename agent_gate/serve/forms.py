"""The bounds of a posted form: what the inbox's forms (and Slack's clicks) may send.

Why bounds of our own: Starlette parses a form with loose defaults (a thousand fields
of up to a megabyte each, a thousand files of any size spooled to disk), and reads a
body of any length before a handler sees it, on routes a person reaches before they
are known (``/login``, a Slack click before its signature is checked). No form of the
inbox needs more than one bulk answer's ticked rows or one edit's longest values, and
none sends a file, so every POST outside ``/api`` is held here, before anything is
parsed (``FormBounds``, ASGI middleware):

* its type must be ``application/x-www-form-urlencoded`` (what every inbox form and
  Slack send; a POST with no type and no body is an empty form): anything else,
  ``multipart/form-data`` with its files included, is 415, its body read within the
  same bound and dropped, never parsed nor kept;
* its body is at most ``MAX_FORM_BYTES``: a ``Content-Length`` above it is 413 before
  a byte of the body is read, and a body sent without one (chunked) is 413 as soon as
  it passes the bound, so at most that much is ever held;
* the handlers parse it with ``FORM_LIMITS`` (no file, ``MAX_FORM_FIELDS`` fields, each
  at most ``FORM_PART_BYTES``), which Starlette refuses past with a 400 naming the
  limit, never a value.

The JSON API is not held here: it answers nothing before a bearer token is checked
(``app``'s middleware), and its bodies are validated by their models.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent_gate.policy.approval_model import MAX_EDITED_FIELDS
from agent_gate.policy.edits import MAX_NAME_CHARS, MAX_VALUE_CHARS

__all__ = ["FORM_LIMITS", "FORM_PART_BYTES", "FORM_TYPE", "MAX_FORM_BYTES",
           "MAX_FORM_FIELDS", "MAX_PICKS", "FormBounds"]

FORM_TYPE = "application/x-www-form-urlencoded"
"""The one body type a form route reads."""

MAX_PICKS = 500
"""The most rows one bulk answer names."""

MAX_FORM_FIELDS = max(MAX_PICKS, 2 * MAX_EDITED_FIELDS) + 16
"""The most fields a form may carry: a bulk answer's ticked rows, or an edit's two
fields (value and kind) per editable path, and the handful every form has (CSRF token,
args_hash, back, reason, expiry...). Starlette's default is 1,000."""

FORM_PART_BYTES = 12 * MAX_VALUE_CHARS + 12 * MAX_NAME_CHARS + 64
"""The most bytes one field (its name and value, as sent) may take: the longest value
an edit may hold (``policy.edits.MAX_VALUE_CHARS`` characters) in the longest encoding
a browser sends it in (four UTF-8 bytes a character, each percent-encoded: 12 bytes),
under the longest name. About 770 KiB; Starlette's default is 1 MiB."""

MAX_FORM_BYTES = 4 * FORM_PART_BYTES
"""The most bytes a form's body may have (about 3 MiB): four fields of the longest
value in the longest encoding, far above a bulk answer of ``MAX_PICKS`` rows (about
40 KiB) or a Slack click. Starlette sets no bound on a body."""

FORM_LIMITS: dict[str, Any] = {"max_files": 0, "max_fields": MAX_FORM_FIELDS,
                               "max_part_size": FORM_PART_BYTES}
"""``request.form(**FORM_LIMITS)``: what every form handler parses with."""


_TOO_BIG = f"a form's body is at most {MAX_FORM_BYTES} bytes"


def _held(scope: Scope) -> bool:
    """A POST outside the JSON API: a form of the inbox, the login, a Slack click."""
    path = str(scope.get("path", ""))
    return (scope["type"] == "http" and scope.get("method") == "POST"
            and not path.startswith("/api/") and path != "/openapi.json")


class FormBounds:
    """ASGI middleware: a form route's body checked for its type and size before the
    application reads it (module docstring); refusals are short plain text."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _held(scope):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_FORM_BYTES):
            await _refuse(413, _TOO_BIG, scope, receive, send)
            return
        body: bytearray | None = bytearray() if kind == FORM_TYPE else None
        read = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            read += len(chunk)
            if read > MAX_FORM_BYTES:
                await _refuse(413, _TOO_BIG, scope, receive, send)
                return
            if body is not None:
                body += chunk
            if not message.get("more_body", False):
                break
        if body is None and (kind or read):  # read to its end (and dropped) so the
            # connection closes cleanly; no type and no body is an empty form
            await _refuse(415, f"a form is sent as {FORM_TYPE}; nothing else is read "
                               "here (no file is taken)", scope, receive, send)
            return
        await self.app(scope, _replay(bytes(body or b""), receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body read, handed to the application as one message; then the client's
    own messages (a disconnect), as the server would send them."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _refuse(status: int, why: str, scope: Scope, receive: Receive, send: Send) -> None:
    """A refusal that quotes nothing of the request; the connection is closed after it
    (a body too big is left unread), so the client cannot follow with more on it."""
    response = PlainTextResponse(f"Refused: {why}.", status_code=status,
                                 headers={"Connection": "close"})
    await response(scope, receive, send)
