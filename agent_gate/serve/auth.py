"""Who is asking: bearer tokens for the API, sessions and CSRF for the browser.

- The API takes ``Authorization: Bearer TOKEN`` and nothing else, so a browser's
  cookies can never act on it (no cross-site request can set that header).
- The browser exchanges a token once, on the login form, for a session: a random id
  in an ``HttpOnly``, ``SameSite=Strict`` cookie, kept in this process's memory with
  the operator's name, the digest of the token it was opened with and the session's
  CSRF token. Sessions end when the server stops, or after ``SESSION_SECONDS``; an
  operator removed, or removed and added again under the same name (a new token),
  has no session left: every request looks the operator up by that digest.
- Every state-changing form carries that CSRF token (a synchronizer token, compared
  in constant time) and must come with an ``Origin`` (or ``Referer``) of this very
  server, when the browser sends one.
- Failed logins are counted per client address in memory; past ``LOGIN_FAILURES``
  within ``LOGIN_WINDOW`` seconds every attempt from it is refused until the window
  has passed, a right token included.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "COOKIE",
    "LOGIN_FAILURES",
    "LOGIN_WINDOW",
    "MAX_SESSIONS",
    "SESSION_SECONDS",
    "LoginLimiter",
    "Session",
    "Sessions",
    "bearer_token",
    "same_origin",
]

COOKIE = "agent_gate_session"
SESSION_SECONDS = 8 * 3600.0
MAX_SESSIONS = 10_000
"""The most sessions one server keeps; past it the oldest is dropped first."""
LOGIN_FAILURES = 5
LOGIN_WINDOW = 300.0


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header, or None."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def same_origin(origin: str | None, referer: str | None, host: str | None,
                scheme: str) -> bool:
    """Whether a browser's ``Origin`` (else ``Referer``) names this server; a request
    that sends neither (not a browser form) is left to the CSRF token alone."""
    claimed = origin if origin and origin != "null" else None
    if claimed is None and referer:
        parts = urlsplit(referer)
        claimed = f"{parts.scheme}://{parts.netloc}"
    if claimed is None:
        return origin != "null"
    return host is not None and hmac.compare_digest(claimed, f"{scheme}://{host}")


@dataclass(slots=True)
class Session:
    operator: str
    token_digest: str
    """``operators.token_digest`` of the token the session was opened with."""
    csrf: str
    expires: float
    notes: list[dict[str, Any]] = field(default_factory=list)
    """What the last answers did, shown once on the next page of the list (then
    dropped): an answer returns to the list, never to a page of its own."""


@dataclass
class Sessions:
    """Browser sessions of this process: id -> operator and CSRF token."""

    clock: Callable[[], float] = time.monotonic
    _by_id: dict[str, Session] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, operator: str, token_digest: str) -> tuple[str, Session]:
        sid = secrets.token_urlsafe(32)
        now = self.clock()
        session = Session(operator, token_digest, secrets.token_urlsafe(32),
                          now + SESSION_SECONDS)
        with self._lock:
            if len(self._by_id) >= MAX_SESSIONS:
                self._trim(now)
            self._by_id[sid] = session
        return sid, session

    def _trim(self, now: float) -> None:
        """Drop the ended sessions, then the oldest while there are too many (a
        client that keeps no cookie opens one per page when a proxy signs it in)."""
        for sid in [s for s, v in self._by_id.items() if v.expires <= now]:
            del self._by_id[sid]
        while len(self._by_id) >= MAX_SESSIONS:
            del self._by_id[next(iter(self._by_id))]

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        with self._lock:
            session = self._by_id.get(sid)
            if session is not None and session.expires <= self.clock():
                del self._by_id[sid]
                return None
        return session

    def end(self, sid: str | None) -> None:
        with self._lock:
            self._by_id.pop(sid or "", None)

    @staticmethod
    def csrf_ok(session: Session, sent: str | None) -> bool:
        return bool(sent) and hmac.compare_digest(session.csrf, sent or "")


@dataclass
class LoginLimiter:
    """Failed logins per client address, in a sliding window."""

    failures: int = LOGIN_FAILURES
    window: float = LOGIN_WINDOW
    clock: Callable[[], float] = time.monotonic
    _seen: dict[str, deque[float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _recent(self, client: str) -> deque[float]:
        times = self._seen.setdefault(client, deque())
        cutoff = self.clock() - self.window
        while times and times[0] <= cutoff:
            times.popleft()
        return times

    def blocked(self, client: str) -> bool:
        with self._lock:
            return len(self._recent(client)) >= self.failures

    def failed(self, client: str) -> None:
        with self._lock:
            self._recent(client).append(self.clock())

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._seen.pop(client, None)
