"""What every response of ``agent-gate serve`` tells the browser it may do with it.

- ``Content-Security-Policy``: nothing loads but the inbox's one style sheet and its
  one script, both inline and allowed by their hashes (``INBOX_CSS``, ``INBOX_JS``): no
  other script, inline or from anywhere (a model's text that reached a page as markup
  could not run); the script may fetch from this server only (the live list); forms post
  only to this server; ``frame-ancestors 'none'``, so no other site can frame a page
  and trick an operator into clicking Approve (clickjacking).
- ``X-Frame-Options: DENY``: the same, for browsers that predate ``frame-ancestors``.
- ``X-Content-Type-Options: nosniff``: a JSON answer that quotes a model's text is
  never taken for HTML.
- ``Referrer-Policy: same-origin``: a link out of the inbox does not carry a call's
  URL to another site, and a form still sends its ``Origin`` (which the CSRF check
  reads; ``no-referrer`` would make it ``null``).
- ``Cache-Control: no-store``: pages show arguments; no disk cache keeps them.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["INBOX_CSS", "INBOX_JS", "SECURITY_HEADERS", "SecurityHeaders"]

_HERE = Path(__file__).parent / "templates"
INBOX_CSS = (_HERE / "inbox.css").read_text(encoding="utf-8")
"""The inbox's style sheet, inlined in every page (``base.html``): no route serves it."""
INBOX_JS = (_HERE / "inbox.js").read_text(encoding="utf-8")
"""The inbox's script (live list, keyboard), inlined likewise; the pages work without it."""


def _hash(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


_CSS_HASH = _hash(INBOX_CSS)
_JS_HASH = _hash(INBOX_JS)

SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": (
        f"default-src 'none'; style-src 'sha256-{_CSS_HASH}'; "
        f"script-src 'sha256-{_JS_HASH}'; connect-src 'self'; img-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class SecurityHeaders:
    """ASGI middleware: ``SECURITY_HEADERS`` on every HTTP response, errors included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._headers = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, self._sending(send))

    def _sending(self, send: Send) -> Callable[[Message], Awaitable[None]]:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k for k, _ in self._headers}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": kept + self._headers}
            await send(message)

        return sending
