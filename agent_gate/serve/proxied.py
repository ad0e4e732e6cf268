"""Who a request is from when the identity provider's proxy vouches for it.

The glue between ``identity`` (what an assertion is worth) and the two front ends:
the API reads the operator from the assertion on every request; the browser gets a
session too, only for what a session is for here (the CSRF token of its forms and the
notes the list shows once), bound to the assertion's name: on every request the
assertion is verified again and must name the session's operator, and a session
opened this way is worth nothing without it (``identity.IDENTITY_DIGEST``: no token
hashes to it). Every refusal is audited, as a bad token's is.
"""

from __future__ import annotations

from fastapi import Request

from agent_gate.ledger.views.operators import Operator, actor_of
from agent_gate.serve.auth import COOKIE, Session, Sessions
from agent_gate.serve.identity import IDENTITY_DIGEST, IdentityGate, IdentityVerdict
from agent_gate.serve.service import InboxService

__all__ = ["NEW_SESSION", "from_proxy", "proxied_session", "refused", "tokens_allowed"]

NEW_SESSION = "new_session"
"""The ``request.state`` attribute naming a session opened for this request: the
application sets its cookie on the response."""
VERDICT = "identity_verdict"
"""The ``request.state`` attribute holding this request's verdict (None: no assertion)."""
REFUSED = "identity_refused"
"""The ``request.state`` attribute holding this request's refused ``IdentityVerdict``."""


def _gate(request: Request) -> IdentityGate | None:
    gate: IdentityGate | None = getattr(request.app.state, "identity", None)
    return gate


def _service(request: Request) -> InboxService:
    service: InboxService = request.app.state.service
    return service


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def tokens_allowed(request: Request) -> bool:
    """Whether operator tokens (and their sessions) still count on this server."""
    gate = _gate(request)
    return gate is None or gate.config.allow_tokens


def from_proxy(request: Request) -> IdentityVerdict | None:
    """The verdict on the request's assertion; None when the server reads none (no
    ``identity:`` configured) or the request carries none. A refusal is audited."""
    if hasattr(request.state, VERDICT):  # verified once per request
        known: IdentityVerdict | None = getattr(request.state, VERDICT)
        return known
    gate = _gate(request)
    assertion = gate.assertion(request.headers) if gate is not None else None
    verdict = gate.check(assertion) if gate is not None and assertion is not None else None
    setattr(request.state, VERDICT, verdict)
    if verdict is None:
        return None
    if verdict.operator is None:
        setattr(request.state, REFUSED, verdict)
        _service(request).audit_refusal(
            actor=f"identity:{verdict.name}" if verdict.name else "anonymous",
            event="identity",
            detail={"path": request.url.path[:200], "method": request.method[:10],
                    "client": _client(request), "status": verdict.status,
                    "reason": verdict.reason})
    return verdict


def refused(request: Request) -> IdentityVerdict | None:
    """The refused verdict of this request, if its assertion was refused."""
    verdict: IdentityVerdict | None = getattr(request.state, REFUSED, None)
    return verdict


def proxied_session(request: Request, verdict: IdentityVerdict
                    ) -> tuple[Operator, Session] | None:
    """The browser session of the operator the assertion names (opened if there is
    none for them yet: ``NEW_SESSION``); None when the assertion was refused."""
    op = verdict.operator
    if op is None:
        return None
    sessions: Sessions = request.app.state.sessions
    sid = request.cookies.get(COOKIE)
    session = sessions.get(sid)
    bound = IDENTITY_DIGEST + op.name
    if session is None or session.operator != op.name or session.token_digest != bound:
        sid, session = sessions.start(op.name, bound)
        setattr(request.state, NEW_SESSION, sid)
        _service(request).audit_allowed(actor=actor_of(op.name), event="login", detail={
            "client": _client(request), "via": "identity"})
    return op, session
