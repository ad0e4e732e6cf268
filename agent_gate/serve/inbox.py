"""The web inbox of ``agent-gate serve``: server-rendered pages, no JavaScript.

A person logs in with their operator token once (the session cookie then stands in
for it: ``auth``), reads the waiting calls with their arguments and the policy's
reasons, and approves or denies with a reason and an expiry; resolves calls in
doubt; reads tasks, their timelines and the audit trail with its verification.
Every form that changes something carries the session's CSRF token and is refused
(403, audited) without it or from another origin.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool

from agent_gate.errors import AgentGateError
from agent_gate.ledger.operators import Operator, OperatorRight, actor_of
from agent_gate.serve.api import client_of, service_of
from agent_gate.serve.auth import COOKIE, LoginLimiter, Session, Sessions, same_origin
from agent_gate.serve.service import Answer, status_of

__all__ = ["EXPIRY_CHOICES", "router"]

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))
templates.env.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False,
                                                      sort_keys=True)
templates.env.filters["when"] = lambda iso: (iso or "")[:19].replace("T", " ") + (
    " UTC" if iso else "")

EXPIRY_CHOICES: dict[str, float | None] = {
    "30m": 1800.0, "2h": 7200.0, "24h": 86400.0, "7d": 604800.0, "never": None}
"""The expiries the approve form offers (label -> seconds; None: no expiry)."""


def _sessions(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.sessions
    return sessions


def _current(request: Request) -> tuple[Operator, Session] | None:
    session = _sessions(request).get(request.cookies.get(COOKIE))
    if session is None:
        return None
    op = service_of(request).operator(session.operator)
    return (op, session) if op is not None else None


def _page(request: Request, name: str, who: tuple[Operator, Session] | None,
          status: int = 200, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(
        request, name, {"op": who[0] if who else None, "csrf": who[1].csrf if who else "",
                        "expiries": list(EXPIRY_CHOICES), "can": _rights(who), **context},
        status_code=status)


def _rights(who: tuple[Operator, Session] | None) -> Callable[[str, str], bool]:
    """``can("approve", tool)`` for the templates: which forms to offer (the server
    checks again when one is posted)."""
    return lambda right, tool: who is not None and who[0].may(OperatorRight(right), tool)


def _to_login() -> RedirectResponse:
    return RedirectResponse("/login", status_code=303)


def _viewing(request: Request, render: Callable[[tuple[Operator, Session]], Response]
             ) -> Response:
    """A page for a logged-in operator; anyone else goes to the login form."""
    who = _current(request)
    return _to_login() if who is None else render(who)


@router.get("/", response_class=HTMLResponse)
def root() -> RedirectResponse:
    return RedirectResponse("/inbox", status_code=303)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> HTMLResponse:
    return _page(request, "login.html", None)


@router.post("/login", response_class=HTMLResponse)
def login(request: Request, token: Annotated[str, Form(max_length=200)]) -> Response:
    service, limiter = service_of(request), request.app.state.limiter
    assert isinstance(limiter, LoginLimiter)
    client = client_of(request)
    origin_ok = same_origin(request.headers.get("origin"), request.headers.get("referer"),
                            request.headers.get("host"), request.url.scheme)
    if limiter.blocked(client) or not origin_ok:
        why = "too many failed logins" if origin_ok else "cross-origin login"
        service.audit_refusal(actor="anonymous", event="login",
                              detail={"client": client, "reason": why})
        return _page(request, "login.html", None, status=429 if origin_ok else 403,
                     error=f"Refused: {why}; try again later.")
    op = service.authenticate(token.strip())
    if op is None:
        limiter.failed(client)
        service.audit_refusal(actor="anonymous", event="login",
                              detail={"client": client, "reason": "unknown token"})
        return _page(request, "login.html", None, status=401, error="Unknown token.")
    limiter.succeeded(client)
    service.audit_allowed(actor=actor_of(op.name), event="login", detail={"client": client})
    sid, _ = _sessions(request).start(op.name)
    response = RedirectResponse("/inbox", status_code=303)
    response.set_cookie(COOKIE, sid, httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
    return response


@router.post("/logout")
def logout(request: Request, csrf: Annotated[str, Form(max_length=100)] = "") -> Response:
    """End the session (with its CSRF token, so another site cannot log one out)."""
    who = _current(request)
    if who is not None and _forged(request, who, csrf) is not None:
        return _page(request, "message.html", who, status=403, title="Refused",
                     message="Refused: the form's CSRF token is missing or wrong.")
    _sessions(request).end(request.cookies.get(COOKIE))
    response = _to_login()
    response.delete_cookie(COOKIE, path="/")
    return response


@router.get("/inbox", response_class=HTMLResponse)
def inbox(request: Request) -> Response:
    return _viewing(request, lambda who: _page(
        request, "inbox.html", who, calls=[d.to_dict() for d in service_of(request).pending()]))


@router.get("/inbox/calls/{task_id}/{call_id}", response_class=HTMLResponse)
def call_page(request: Request, task_id: str, call_id: str) -> Response:
    return _viewing(request, lambda who: _page(
        request, "call.html", who, d=service_of(request).details(call_id, task_id).to_dict()))


@router.get("/inbox/in-doubt", response_class=HTMLResponse)
def in_doubt_page(request: Request) -> Response:
    return _viewing(request, lambda who: _page(
        request, "in_doubt.html", who, calls=[d.to_dict() for d in service_of(request).in_doubt()]))


@router.get("/inbox/tasks", response_class=HTMLResponse)
def tasks_page(request: Request, after: str | None = None) -> Response:
    return _viewing(request, lambda who: _page(
        request, "tasks.html", who, tasks=service_of(request).tasks(after=after or None)))


@router.get("/inbox/tasks/{task_id}", response_class=HTMLResponse)
def task_page(request: Request, task_id: str) -> Response:
    return _viewing(request, lambda who: _page(
        request, "task.html", who, t=service_of(request).timeline(task_id)))


@router.get("/inbox/audit", response_class=HTMLResponse)
def audit_page(request: Request, after: int | None = None, verify: bool = False) -> Response:
    service = service_of(request)
    return _viewing(request, lambda who: _page(
        request, "audit.html", who, entries=service.audit(after=after), head=service.head(),
        verified=service.verify() if verify else None))


@router.post("/inbox/calls/{task_id}/{call_id}/{action}", response_class=HTMLResponse)
async def answer(request: Request, task_id: str, call_id: str, action: str) -> Response:
    """Approve, deny or resolve from a form: session, origin and CSRF token checked."""
    form = await request.form()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    return await run_in_threadpool(_answer, request, task_id, call_id, action, fields)


def _answer(request: Request, task_id: str, call_id: str, action: str,
            fields: dict[str, str]) -> Response:
    service = service_of(request)
    who = _current(request)
    refusal = _forged(request, who, fields.get("csrf"))
    if refusal is not None:
        service.audit_refusal(
            actor=actor_of(who[0].name) if who else "anonymous", event=f"form_{action}"[:60],
            task_id=task_id, call_id=call_id,
            detail={"client": client_of(request), "reason": refusal})
        return _page(request, "message.html", who, status=403, title="Refused",
                     message=f"Refused: {refusal}.")
    assert who is not None
    op = who[0]
    reason = fields.get("reason", "").strip() or None
    try:
        if action == "approve":
            expiry = fields.get("expires_in", "24h")
            if expiry not in EXPIRY_CHOICES:
                return _page(request, "message.html", who, status=400, title="Bad request",
                             message=f"Unknown expiry {expiry[:10]!r}.")
            result = service.approve(op, Answer(task_id, call_id, reason,
                                                EXPIRY_CHOICES[expiry]))
            text = f"Approved call {call_id} ({result['tool']}); it runs on the next resume."
        elif action == "deny":
            service.deny(op, Answer(task_id, call_id, reason))
            text = f"Denied call {call_id}: it will not run."
        elif action == "resolve":
            outcome = service.resolve(op, Answer(task_id, call_id, reason),
                                      fields.get("as", ""))
            text = f"Resolved call {call_id}: now {outcome['state']}."
        else:
            return _page(request, "message.html", who, status=404, title="Not found",
                         message="No such action.")
    except AgentGateError as exc:
        return _page(request, "message.html", who, status=status_of(exc), title="Refused",
                     message=str(exc))
    return _page(request, "message.html", who, title="Done", message=text,
                 link=f"/inbox/calls/{task_id}/{call_id}")


def _forged(request: Request, who: tuple[Operator, Session] | None,
            sent: str | None) -> str | None:
    """Why a state-changing form is refused (None: it is this operator's own)."""
    if who is None:
        return "not logged in"
    if not same_origin(request.headers.get("origin"), request.headers.get("referer"),
                       request.headers.get("host"), request.url.scheme):
        return "the form came from another origin"
    if not Sessions.csrf_ok(who[1], sent):
        return "the form's CSRF token is missing or wrong"
    return None
