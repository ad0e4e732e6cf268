"""The web inbox of ``agent-gate serve``: server-rendered pages, a small script on top.

A person logs in with their operator token once (the session cookie then stands in
for it: ``auth``), reads the waiting calls (and the calls in doubt) across tasks as a
list, a page at a time (``listing``: filters, counts, keyset pages), opens one on its
own page with its arguments and the policy's reasons, and approves or denies it with
a reason and an expiry, or ticks rows and answers them all at once; resolves calls in
doubt; reads tasks, their timelines and the audit trail with its verification. An
answer returns to the list where the person was, with what it did on top. Every
form that changes something carries the session's CSRF token and is refused (403,
audited) without it or from another origin.

The list refreshes itself by polling ``/inbox/rows`` with ``If-None-Match`` (304
while nothing changed), not by server-sent events: a new call reaches the ledger from
any process, and only PostgreSQL could announce it (``notify``), so a server would
poll the database per open stream anyway; a poll answered 304 costs one page read
and holds no connection or worker thread between polls, behind any proxy.

A call is reached by ``ref``, the id the ledger gave its row, and an answer's form
carries the hash of the arguments the page showed (``args_hash``): a call id or task
id, which a model may choose (``../``, ``?``, ``#``...), never becomes a path. Task ids
go in query strings, every reserved character encoded (the ``q`` filter).
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool

from agent_gate.errors import AgentGateError
from agent_gate.gate.desk import runs_next
from agent_gate.ledger.views.operators import Operator, OperatorRight, actor_of, token_digest
from agent_gate.serve.api import MAX_ROW_ID, NO_NUL, Name, Ref, client_of, service_of
from agent_gate.serve.auth import COOKIE, LoginLimiter, Session, Sessions, same_origin
from agent_gate.serve.bodies import FORM_LIMITS, MAX_PICKS
from agent_gate.serve.editform import MAX_VALUE_CHARS, edit_fields, edit_of
from agent_gate.serve.headers import INBOX_CSS, INBOX_JS
from agent_gate.serve.listing import AGES, STATES, ListView, etag
from agent_gate.serve.mail import link_signature
from agent_gate.serve.proxied import from_proxy, proxied_session, refused, tokens_allowed
from agent_gate.serve.service import OperatorAnswer, call_json, status_of

__all__ = ["EXPIRY_CHOICES", "call_link", "router", "task_link"]

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))
templates.env.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False,
                                                      sort_keys=True)
templates.env.filters["when"] = lambda iso: (iso or "")[:19].replace("T", " ") + (
    " UTC" if iso else "")
templates.env.filters["q"] = lambda v: quote(str(v), safe="")
"""Every reserved character (``/ ? # & . %``...) encoded: for a query string value."""
templates.env.globals["inbox_css"] = Markup(INBOX_CSS)  # our own file, not text from a request
templates.env.globals["inbox_js"] = Markup(INBOX_JS)  # our own file, not text from a request
templates.env.filters["age"] = lambda seconds: _age(int(seconds))
templates.env.filters["capitalize_first"] = lambda text: str(text)[:1].upper() + str(text)[1:]
templates.env.globals["edit_max_chars"] = MAX_VALUE_CHARS  # the textarea's, the server's too


def _age(seconds: int) -> str:
    """``3m``, ``2h``, ``5d``: how long a call has waited, at a glance."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def call_link(ref: int) -> str:
    """The inbox page of the call whose ledger row is ``ref``."""
    return f"/inbox/calls/{int(ref)}"


def _qs(view: ListView) -> str:
    """The list a call page was opened from, as that page's query string."""
    query = urlencode(view.params())
    return f"?{query}" if query else ""


def task_link(task_id: str) -> str:
    """The inbox page of a task, its id in the query (never a path segment)."""
    return f"/inbox/task?task={quote(task_id, safe='')}"

EXPIRY_CHOICES: dict[str, float | None] = {
    "30m": 1800.0, "2h": 7200.0, "24h": 86400.0, "7d": 604800.0, "never": None}
"""The expiries the approve form offers (label -> seconds; None: no expiry)."""


def _sessions(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.sessions
    return sessions


def _current(request: Request) -> tuple[Operator, Session] | None:
    """The session's operator, while the token it was opened with is still theirs: a
    removed operator, or one added again under the same name, has no session left.
    A request carrying the identity provider's assertion is its operator's alone."""
    verdict = from_proxy(request)
    if verdict is not None:
        return proxied_session(request, verdict)
    if not tokens_allowed(request):
        return None
    sessions = _sessions(request)
    sid = request.cookies.get(COOKIE)
    session = sessions.get(sid)
    if session is None:
        return None
    op = service_of(request).holder(session.token_digest)
    if op is None or op.name != session.operator:
        sessions.end(sid)
        return None
    return op, session


def _page(request: Request, name: str, who: tuple[Operator, Session] | None,
          status: int = 200, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(
        request, name, {"op": who[0] if who else None, "csrf": who[1].csrf if who else "",
                        "expiries": list(EXPIRY_CHOICES), "can": _rights(who),
                        **context},
        status_code=status)


def _rights(who: tuple[Operator, Session] | None) -> Callable[[str, str], bool]:
    """``can("approve", tool)`` for the templates: the operator's rights over a tool
    (a grant's Revoke, a field's Reveal). Whether to offer an answer to a call is
    ``InboxService.rights``, per call (a row's and a page's ``may_*``)."""
    return lambda right, tool: who is not None and who[0].may(OperatorRight(right), tool)


def _to_login() -> RedirectResponse:
    return RedirectResponse("/login", status_code=303)


def _viewing(request: Request, render: Callable[[tuple[Operator, Session]], Response]
             ) -> Response:
    """A page for a logged-in operator; anyone else goes to the login form."""
    who = _current(request)
    if who is None and refused(request) is not None:
        return _not_accepted(request)
    return _to_login() if who is None else render(who)


def _not_accepted(request: Request) -> HTMLResponse:
    """The page for a refused identity assertion: nothing of it quoted."""
    verdict = refused(request)
    status = verdict.status if verdict is not None else 401
    why = ("Your identity holds no operator rights on this server." if status == 403
           else "The identity provider's assertion was not accepted: sign in again.")
    return _page(request, "message.html", None, status=status, title="Not signed in",
                 message=why)


@router.get("/", response_class=HTMLResponse)
def root() -> RedirectResponse:
    return RedirectResponse("/inbox", status_code=303)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> Response:
    if from_proxy(request) is not None:  # signed in by the proxy already, or refused
        return _viewing(request, lambda who: RedirectResponse("/inbox", status_code=303))
    return _page(request, "login.html", None)


@router.post("/login", response_class=HTMLResponse)
def login(request: Request, token: Annotated[str, Form(max_length=200)]) -> Response:
    service, limiter = service_of(request), request.app.state.limiter
    assert isinstance(limiter, LoginLimiter)
    if from_proxy(request) is not None:  # the assertion decides when it is there
        return _viewing(request, lambda who: RedirectResponse("/inbox", status_code=303))
    if not tokens_allowed(request):
        return _page(request, "login.html", None, status=403,
                     error="Sign in through the identity provider: tokens are not taken here.")
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
    sid, _ = _sessions(request).start(op.name, token_digest(token.strip()))
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


def _listed(request: Request, who: tuple[Operator, Session], view: ListView
            ) -> dict[str, Any]:
    """The page of the list ``view`` names, its counts, and the links around it."""
    now = datetime.now(UTC)
    service = service_of(request)
    rows, counts = service.inbox(view.query(who[0], now, **service.mine(who[0]),
                                            limit=view.limit + 1))
    if view.before is not None:
        has_prev, has_next = len(rows) > view.limit, True
        rows = rows[-view.limit:]
    else:
        has_prev, has_next = view.after is not None, len(rows) > view.limit
        rows = rows[:view.limit]
    prev = (view.href(before=rows[0].ref, after=None) if rows else view.filtered()) \
        if has_prev else None
    after = view.href(after=rows[-1].ref, before=None) if has_next and rows else None
    progress = service.quorum_progress(rows)
    return {"view": view, "counts": counts,
            "rows": [{**r.to_dict(now), **service.rights(who[0], r.to_dict(now),
                                                         r.principal).to_dict()}
                     for r in rows],
            "progress": progress,
            "etag": etag(counts.mark, view), "prev": prev, "next": after,
            "query": urlencode(view.params()), "states": list(STATES), "ages": list(AGES)}


@router.get("/inbox", response_class=HTMLResponse)
def inbox(request: Request) -> Response:
    """The waiting calls across tasks, filtered and paged; what the last answers did."""
    def render(who: tuple[Operator, Session]) -> Response:
        listed = _listed(request, who, ListView.read(request.query_params))
        notes, who[1].notes[:] = list(who[1].notes), []
        return _page(request, "inbox.html", who, notes=notes, **listed)
    return _viewing(request, render)


@router.get("/inbox/rows", response_class=HTMLResponse)
def inbox_rows(request: Request) -> Response:
    """The list's rows and counts alone, for the page's script: 304 while the
    ``If-None-Match`` it sends still names them."""
    def render(who: tuple[Operator, Session]) -> Response:
        view = ListView.read(request.query_params)
        sent = request.headers.get("if-none-match")
        if sent is not None:  # one aggregate decides; the page is read only if it moved
            service = service_of(request)
            tag = etag(service.inbox_mark(view.query(
                who[0], datetime.now(UTC), **service.mine(who[0]))), view)
            if sent == tag:
                return Response(status_code=304, headers={"ETag": tag})
        listed = _listed(request, who, view)
        page = _page(request, "_rows.html", who, **listed)
        page.headers["ETag"] = listed["etag"]
        return page
    return _viewing(request, render)


@router.get("/inbox/calls/{ref}", response_class=HTMLResponse)
def call_page(request: Request, ref: Ref) -> Response:
    """One call whole; its query string is the list it was opened from (``back``)."""
    view = ListView.read(request.query_params)
    return _viewing(request, lambda who: _call_page(request, who, ref, view))


def _call_page(request: Request, who: tuple[Operator, Session], ref: int, view: ListView,
               revealed: dict[str, Any] | None = None) -> Response:
    service = service_of(request)
    details = service.details(ref)
    d = call_json(details)
    d.update(service.call_rights(who[0], d).to_dict())
    after = replace(view.query(who[0], datetime.now(UTC), **service.mine(who[0]),
                               limit=1), after=ref, before=None)
    following, _ = service.inbox(after)
    nxt = call_link(following[0].ref) + _qs(view) if following else None
    return _page(request, "call.html", who, d=d, view=view, back=view.href(),
                 back_query=urlencode(view.params()), next_call=nxt,
                 sealed=service.sealed_fields(ref), revealed=revealed,
                 approval=service.approval_state(ref),
                 editable=edit_fields(d["arguments"], service.editable(details.call)))


@router.get("/inbox/call")
def call_by_name(request: Request, task: Name, call: Name,
                 sig: Annotated[str | None, Query(max_length=64)] = None) -> Response:
    """A call named by its task and call id (a webhook's or a mail's link): to its page
    by ``ref``. A link with ``sig`` (a mail's) must be signed by this server."""
    if sig is not None and not any(
            hmac.compare_digest(sig, link_signature(secret, task, call))
            for secret in request.app.state.link_secrets):
        return _page(request, "message.html", _current(request), status=400,
                     title="Not signed here",
                     message="This link was not signed by this server: open the call from "
                             "the inbox instead.", back="/inbox")
    return _viewing(request, lambda who: RedirectResponse(
        call_link(service_of(request).find(call, task).call.row_id), status_code=303))


@router.get("/inbox/in-doubt", response_class=HTMLResponse)
def in_doubt_page(request: Request) -> Response:
    """The calls in doubt: the list, filtered to them."""
    return _viewing(request, lambda who: RedirectResponse(
        ListView(state="in_doubt").href(), status_code=303))


@router.get("/inbox/tasks", response_class=HTMLResponse)
def tasks_page(request: Request,
               after: Annotated[str | None, Query(max_length=255, pattern=NO_NUL)] = None
               ) -> Response:
    return _viewing(request, lambda who: _page(
        request, "tasks.html", who, tasks=service_of(request).tasks(after=after or None)))


@router.get("/inbox/task", response_class=HTMLResponse)
def task_page(request: Request, task: Name) -> Response:
    return _viewing(request, lambda who: _page(
        request, "task.html", who, t=service_of(request).timeline(task)))


@router.get("/inbox/audit", response_class=HTMLResponse)
def audit_page(request: Request,
               after: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
               verify: bool = False) -> Response:
    service = service_of(request)
    return _viewing(request, lambda who: _page(
        request, "audit.html", who, entries=service.audit(after=after), head=service.head(),
        verified=service.verify() if verify else None))


@router.get("/inbox/grants", response_class=HTMLResponse)
def grants_page(request: Request) -> Response:
    """Every grant, newest first, with a Revoke button where the operator may."""
    def render(who: tuple[Operator, Session]) -> Response:
        notes = [n for n in who[1].notes if n.get("grants")]
        who[1].notes[:] = [n for n in who[1].notes if not n.get("grants")]
        return _page(request, "grants.html", who,
                     grants=[g.to_dict() for g in service_of(request).grants()],
                     message=notes[-1]["message"] if notes else None)
    return _viewing(request, render)


@router.post("/inbox/grants/{grant_id}/revoke", response_class=HTMLResponse)
async def revoke_grant(request: Request, grant_id: Ref) -> Response:
    """End a grant from its row: session, origin and CSRF token checked, audited."""
    form = await request.form(**FORM_LIMITS)
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    return await run_in_threadpool(_revoke, request, grant_id, fields)


def _revoke(request: Request, grant_id: int, fields: dict[str, str]) -> Response:
    service = service_of(request)
    who = _current(request)
    refusal = _forged(request, who, fields.get("csrf"))
    if refusal is not None:
        service.audit_refusal(actor=actor_of(who[0].name) if who else "anonymous",
                              event="form_revoke_grant",
                              detail={"client": client_of(request), "reason": refusal,
                                      "grant_id": grant_id})
        return _page(request, "message.html", who, status=403, title="Refused",
                     message=f"Refused: {refusal}.")
    assert who is not None
    try:
        g = service.revoke_grant(who[0], grant_id, fields.get("reason", "").strip() or None)
    except AgentGateError as exc:
        return _page(request, "message.html", who, status=status_of(exc), title="Refused",
                     message=str(exc), back="/inbox/grants")
    _note(who[1], {"grants": True, "message": f"Revoked grant {g.id} ({g.option}) after "
                                              f"{g.used_calls} call(s)."})
    return RedirectResponse("/inbox/grants", status_code=303)


_ACTIONS = ("approve", "deny", "resolve")


@router.post("/inbox/calls/{ref}/{action}", response_class=HTMLResponse)
async def answer(request: Request, ref: Ref, action: str) -> Response:
    """Approve, deny or resolve from a form: session, origin and CSRF token checked."""
    form = await request.form(**FORM_LIMITS)
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    return await run_in_threadpool(_answer, request, ref, action, fields)


def _answer(request: Request, ref: int, action: str, fields: dict[str, str]) -> Response:
    service = service_of(request)
    who = _current(request)
    refusal = _forged(request, who, fields.get("csrf"))
    if refusal is not None:
        rec = service.located(ref)
        service.audit_refusal(
            actor=actor_of(who[0].name) if who else "anonymous",
            event=f"form_{action if action in (*_ACTIONS, 'reveal') else 'unknown'}",
            task_id=rec.task_id if rec else None, call_id=rec.call_id if rec else None,
            detail={"client": client_of(request), "reason": refusal, "ref": ref})
        return _page(request, "message.html", who, status=403, title="Refused",
                     message=f"Refused: {refusal}.")
    assert who is not None
    op = who[0]
    back = ListView.from_back(fields.get("back"))
    reason = fields.get("reason", "").strip() or None
    shown = fields.get("args_hash", "")
    if action == "reveal":
        return _revealed(request, who, ref, fields.get("field", ""), back)
    if action not in _ACTIONS:
        return _page(request, "message.html", who, status=404, title="Not found",
                     message="No such action.")
    if not shown:
        return _page(request, "message.html", who, status=400, title="Bad request",
                     message="The form names no arguments (args_hash): reload the call "
                             "and answer what it shows.")
    try:
        if action == "approve":
            expiry = fields.get("expires_in", "24h")
            if expiry not in EXPIRY_CHOICES:
                return _page(request, "message.html", who, status=400, title="Bad request",
                             message=f"Unknown expiry {expiry[:10]!r}.")
            grant = fields.get("grant", "").strip()[:64] or None
            result = service.approve(op, OperatorAnswer(
                ref, shown, reason, EXPIRY_CHOICES[expiry], grant=grant, edit=edit_of(fields)))
            then = runs_next(service.task_provider(result["task_id"]), result["task_id"])
            done = (f"Edited ({', '.join(result['edited'])}) and approved"
                    if result.get("edited") else "Approved")
            text = f"{done} call {result['call_id']} ({result['tool']}); {then}."
            text += "".join(f" Grant {g['grant_id']} ({g['option']}) given." for g in
                            result["grants"])
        elif action == "deny":
            outcome = service.deny(op, OperatorAnswer(ref, shown, reason))
            text = (f"Denied call {outcome['call_id']}: it will not run."
                    if outcome["state"] != "awaiting_approval" else
                    f"Denial of call {outcome['call_id']} recorded: it still waits for "
                    "more denials (deny: quorum).")
        else:
            outcome = service.resolve(op, OperatorAnswer(ref, shown, reason),
                                      fields.get("as", ""))
            text = f"Resolved call {outcome['call_id']}: now {outcome['state']}."
            if outcome["state"] == "authorized":
                text += " " + runs_next(service.task_provider(outcome["task_id"]),
                                        outcome["task_id"]) + "."
    except AgentGateError as exc:
        return _page(request, "message.html", who, status=status_of(exc), title="Refused",
                     message=str(exc), link=call_link(ref) + _qs(back),
                     back=back.href())
    _note(who[1], {"message": text, "ref": ref})
    return RedirectResponse(back.href(), status_code=303)


def _revealed(request: Request, who: tuple[Operator, Session], ref: int, field: str,
              view: ListView) -> Response:
    """The call's page with one redacted field in clear, in this response only (every
    response is ``no-store``); refused with why, audited either way."""
    service = service_of(request)
    try:
        shown = service.reveal(who[0], ref, field[:200])
    except AgentGateError as exc:
        return _page(request, "message.html", who, status=status_of(exc), title="Refused",
                     message=str(exc), link=call_link(ref) + _qs(view), back=view.href())
    return _call_page(request, who, ref, view, revealed=shown.to_dict())


def _note(session: Session, note: dict[str, Any]) -> None:
    """Keep what an answer did for the next page of the list (the last 20: a client
    that never reads the list cannot grow the session)."""
    session.notes.append(note)
    del session.notes[:-20]


_PICK = re.compile(r"([1-9][0-9]{0,9}):([0-9a-f]{64})")
"""A bulk form's row: the call's ``ref`` and the hash of the arguments the row showed."""


@router.post("/inbox/bulk", response_class=HTMLResponse)
async def bulk(request: Request) -> Response:
    """Approve or deny every ticked row, each bound to the hash that row showed."""
    form = await request.form(**FORM_LIMITS)
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    picks = [v for v in form.getlist("pick") if isinstance(v, str)]
    return await run_in_threadpool(_bulk, request, fields, picks)


def _bulk(request: Request, fields: dict[str, str], picks: list[str]) -> Response:
    service = service_of(request)
    who = _current(request)
    verb = fields.get("action", "")
    refusal = _forged(request, who, fields.get("csrf"))
    if refusal is not None:
        service.audit_refusal(
            actor=actor_of(who[0].name) if who else "anonymous",
            event=f"form_bulk_{verb if verb in ('approve', 'deny') else 'unknown'}",
            detail={"client": client_of(request), "reason": refusal, "rows": len(picks)})
        return _page(request, "message.html", who, status=403, title="Refused",
                     message=f"Refused: {refusal}.")
    assert who is not None
    back = ListView.from_back(fields.get("back"))
    if verb not in ("approve", "deny") or not picks or len(picks) > MAX_PICKS:
        why = (f"at most {MAX_PICKS} rows at once" if len(picks) > MAX_PICKS
               else "no row was ticked" if not picks else "no such action")
        return _page(request, "message.html", who, status=400, title="Bad request",
                     message=f"Nothing answered: {why}.", back=back.href())
    expiry = fields.get("expires_in", "24h")
    if expiry not in EXPIRY_CHOICES:
        return _page(request, "message.html", who, status=400, title="Bad request",
                     message=f"Unknown expiry {expiry[:10]!r}.", back=back.href())
    reason = fields.get("reason", "").strip()[:1000] or None
    answers, malformed = [], 0
    for pick in dict.fromkeys(picks):
        m = _PICK.fullmatch(pick)
        if m is None or int(m.group(1)) > MAX_ROW_ID:
            malformed += 1
            continue
        answers.append(OperatorAnswer(int(m.group(1)), m.group(2), reason,
                                      EXPIRY_CHOICES[expiry]))
    results = [r.to_dict() for r in service.answer_each(who[0], verb, answers)]
    done = sum(r["done"] for r in results)
    text = (f"{'Approved' if verb == 'approve' else 'Denied'} {done} of "
            f"{len(results) + malformed}")
    if malformed:
        text += f"; {malformed} row(s) named no call and hash (ignored)"
    _note(who[1], {"message": text + ".", "results": results})
    return RedirectResponse(back.href(), status_code=303)


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
