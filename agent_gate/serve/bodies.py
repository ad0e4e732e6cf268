"""The bounds of a request's body: what the inbox's forms, Slack's clicks and the JSON
API may send.

Why bounds of our own: Starlette parses a form with loose defaults (a thousand fields
of up to a megabyte each, a thousand files of any size spooled to disk), and neither
it nor FastAPI bounds a body: a JSON body of any length is read whole and parsed
before its model checks a field. Some routes are reached before a person is known
(``/login``, a Slack click before its signature is checked), and an operator's token
can be stolen or a client buggy. No honest request needs more than one bulk answer's
ticked rows or one edit's longest values, so every body is held here, before anything
is parsed, to one bound, ``MAX_BODY_BYTES``:

* a ``Content-Length`` above it is 413 before a byte of the body is read, and a body
  sent without one (chunked) is 413 as soon as it passes the bound, so at most that
  much is ever held; the refusal quotes nothing of the request;
* every POST outside ``/api`` (``FormBounds``) must be
  ``application/x-www-form-urlencoded`` (what every inbox form and Slack send; a POST
  with no type and no body is an empty form): anything else, ``multipart/form-data``
  with its files included, is 415, its body read within the same bound and dropped,
  never parsed nor kept; the handlers parse it with ``FORM_LIMITS`` (no file,
  ``MAX_FORM_FIELDS`` fields, each at most ``FORM_PART_BYTES``), which Starlette
  refuses past with a 400 naming the limit, never a value;
* every request to ``/api`` (``ApiBounds``), whatever its method and type: its body's
  type and shape are the route's model's to judge. It sits inside the bearer token's
  check (``app``), so a request from nobody known is refused before any of its body
  is read, as before.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent_gate.policy.approval_model import MAX_EDITED_FIELDS
from agent_gate.policy.edits import MAX_NAME_CHARS, MAX_VALUE_CHARS

__all__ = ["FORM_LIMITS", "FORM_PART_BYTES", "FORM_TYPE", "MAX_BODY_BYTES",
           "MAX_FORM_FIELDS", "MAX_PICKS", "ApiBounds", "FormBounds"]

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
either kind of body sends it in, 12 bytes a character (a form: four UTF-8 bytes, each
percent-encoded; JSON: a surrogate pair of ``\\u`` escapes, what Python's
``json.dumps`` writes by default), under the longest name. About 770 KiB; Starlette's
default for a form's field is 1 MiB."""

MAX_BODY_BYTES = 4 * FORM_PART_BYTES
"""The most bytes any request's body may have (about 3 MiB), a form's or the API's:
four fields of the longest value in the longest encoding, far above a bulk answer of
``MAX_PICKS`` rows (about 40 KiB), a Slack click or an API answer with a reason and a
grant. An edit may name up to ``MAX_EDITED_FIELDS`` fields, each up to the longest
value: one whose values together pass this bound in the encoding sent is refused
(413) however it arrives, the inbox's form or the API; four longest values, or many
shorter ones, fit. Starlette and FastAPI set no bound on a body."""

FORM_LIMITS: dict[str, Any] = {"max_files": 0, "max_fields": MAX_FORM_FIELDS,
                               "max_part_size": FORM_PART_BYTES}
"""``request.form(**FORM_LIMITS)``: what every form handler parses with."""


_TOO_BIG = f"a request's body is at most {MAX_BODY_BYTES} bytes"


def _api(scope: Scope) -> bool:
    """A request of the JSON API (or its schema): answered to a bearer token only."""
    path = str(scope.get("path", ""))
    return path.startswith("/api/") or path == "/openapi.json"


def _form(scope: Scope) -> bool:
    """A POST outside the JSON API: a form of the inbox, the login, a Slack click."""
    return scope["type"] == "http" and scope.get("method") == "POST" and not _api(scope)


class FormBounds:
    """ASGI middleware: a form route's body checked for its type and size before the
    application reads it (module docstring); refusals are short plain text."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _form(scope):
            await self.app(scope, receive, send)
            return
        kind = Headers(scope=scope).get("content-type", "").split(";", 1)[0].strip().lower()
        body = await _bounded(scope, receive, send)
        if body is None:
            return
        if kind != FORM_TYPE and (kind or body):  # read to its end (and dropped) so the
            # connection closes cleanly; no type and no body is an empty form
            await _refuse(415, f"a form is sent as {FORM_TYPE}; nothing else is read "
                               "here (no file is taken)", scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)


class ApiBounds:
    """ASGI middleware: an API request's body, whatever its method, read up to
    ``MAX_BODY_BYTES`` and refused (413) past it before the route parses any of it.
    Added inside the bearer token's check (``app``): only a known operator's body is
    read at all."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _api(scope):
            await self.app(scope, receive, send)
            return
        body = await _bounded(scope, receive, send)
        if body is not None:
            await self.app(scope, _replay(body, receive), send)


async def _bounded(scope: Scope, receive: Receive, send: Send) -> bytes | None:
    """The request's whole body, if it is within ``MAX_BODY_BYTES``; else None, the
    413 sent (at once for a larger ``Content-Length``, without reading the body; as
    soon as a body sent without one passes the bound), or the client gone."""
    length = Headers(scope=scope).get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
        await _refuse(413, _TOO_BIG, scope, receive, send)
        return None
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            return None
        body += message.get("body", b"")
        if len(body) > MAX_BODY_BYTES:
            await _refuse(413, _TOO_BIG, scope, receive, send)
            return None
        if not message.get("more_body", False):
            return bytes(body)


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
