"""What every response of ``agent-gate serve`` tells the browser it may do with it.

- ``Content-Security-Policy``: nothing loads but the inbox's one style sheet, inline
  and allowed by its hash (``INBOX_CSS``); no script at all, from anywhere; forms post
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

__all__ = ["INBOX_CSS", "SECURITY_HEADERS", "SecurityHeaders"]

INBOX_CSS = (Path(__file__).parent / "templates" / "inbox.css").read_text(encoding="utf-8")
"""The inbox's style sheet, inlined in every page (``base.html``): no route serves it."""

_CSS_HASH = base64.b64encode(hashlib.sha256(INBOX_CSS.encode("utf-8")).digest()).decode()

SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": (
        f"default-src 'none'; style-src 'sha256-{_CSS_HASH}'; img-src 'self'; "
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
