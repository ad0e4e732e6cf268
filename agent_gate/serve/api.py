"""The JSON API of ``agent-gate serve``: ``/api/...``, bearer tokens only.

Its schema is served at ``/openapi.json``, behind a token like every route but
``/health``. A missing or wrong token is 401, an answer outside the operator's rights
403, and each refusal is in the audit chain.

A call is named in a path only by ``ref``, the id the ledger gave its row (every call
this API returns carries it); task and call ids, chosen by an agent or a model, travel
in query strings and bodies, never in a path a client would build from them. An
answer carries ``args_hash``, the hash of the arguments the operator was shown: the
ledger answers only while the call's arguments still hash to it (412 otherwise).
``POST /api/answers`` gives one approval or denial to many calls, each item answered
as its single route would answer it alone (``InboxService.answer_each``, the inbox's
bulk path), with one result per item.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from agent_gate.gate import DEFAULT_APPROVAL_TTL
from agent_gate.ledger.states import CallState
from agent_gate.ledger.views.details import CallDetails
from agent_gate.ledger.views.inbox import InboxRow
from agent_gate.ledger.views.operators import Operator
from agent_gate.serve.auth import bearer_token
from agent_gate.serve.bodies import MAX_PICKS
from agent_gate.serve.proxied import from_proxy, tokens_allowed
from agent_gate.serve.service import DETAILS_PAGE, InboxService, OperatorAnswer, call_json

__all__ = ["AnswerBody", "AnswersBody", "ResolveBody", "RevealBody", "client_of", "router"]

router = APIRouter(prefix="/api")
_bearer = HTTPBearer(auto_error=False, description="An operator token (`agent-gate operator add`)")

MAX_ROW_ID = 2**31 - 1
"""The largest row id a ledger holds (``tool_calls.id`` and ``audit_events.id`` are
32-bit integers on PostgreSQL): a larger one names nothing, and binding it to those
columns would be a database error, not an answer."""
NO_NUL = r"^[^\x00]*$"
"""Text a ledger column can hold (PostgreSQL refuses NUL): anything else names nothing."""
Ref = Annotated[int, Path(ge=1, le=MAX_ROW_ID,
                          description="The call's `ref`: the ledger's id for it, as listed")]
Name = Annotated[str, Query(min_length=1, max_length=255, pattern=NO_NUL)]
ArgsHash = Annotated[str, Field(
    pattern=r"^[0-9a-f]{64}$",
    description="The `args_hash` of the call as it was shown to the operator; the "
                "answer is refused (412) if the call's arguments no longer hash to it.")]


def service_of(request: Request) -> InboxService:
    service: InboxService = request.app.state.service
    return service


def client_of(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def needs_token(path: str) -> bool:
    """The API and its schema: answered to a bearer token only."""
    return path.startswith("/api/") or path == "/openapi.json"


def request_operator(request: Request) -> tuple[Operator | None, int]:
    """The operator the request is from, else the refusal's status (401, or 403 for an
    identity holding no rights), audited: the proxy's assertion when the server reads
    one and the request carries it (it alone decides then: ``identity``), else the
    bearer token, unless the identity configuration turned tokens off."""
    verdict = from_proxy(request)
    if verdict is not None:
        return verdict.operator, verdict.status
    if not tokens_allowed(request):
        service_of(request).audit_refusal(
            actor="anonymous", event="api_auth",
            detail={"path": request.url.path[:200], "method": request.method[:10],
                    "client": client_of(request), "reason": "no identity assertion"})
        return None, 401
    op = bearer_operator(request)
    return op, 200 if op is not None else 401


def bearer_operator(request: Request) -> Operator | None:
    """The operator whose bearer token came with the request; None refused, audited.

    Run before the request is routed (``app``'s middleware), so that nothing of a
    request without a token is read: a body that is not JSON is a 401 too, not a 422."""
    service = service_of(request)
    token = bearer_token(request.headers.get("authorization"))
    op = service.authenticate(token) if token is not None else None
    if op is None:
        service.audit_refusal(
            actor="anonymous", event="api_auth",
            detail={"path": request.url.path[:200], "method": request.method[:10],
                    "client": client_of(request),
                    "reason": "no bearer token" if token is None else "unknown token"})
    return op


def unauthorized(status: int = 401) -> HTTPException:
    """The refusal of a request from nobody known (401), or from an identity the
    configuration grants nothing (403); it never quotes what was sent."""
    if status == 403:
        return HTTPException(403, "this identity holds no operator rights here")
    return HTTPException(401, "an operator token is required (Authorization: Bearer TOKEN) "
                              "or the identity provider's assertion",
                         headers={"WWW-Authenticate": "Bearer"})


def api_operator(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Operator:
    """The operator the middleware admitted (``bearer_operator``)."""
    op: Operator | None = getattr(request.state, "operator", None)
    status = 401
    if op is None:
        op, status = request_operator(request)
    if op is None:
        raise unauthorized(status)
    return op


Op = Annotated[Operator, Depends(api_operator)]
Service = Annotated[InboxService, Depends(service_of)]


def _finite(value: Any, depth: int = 0) -> bool:
    """No NaN or infinity anywhere in a JSON value (Python's parser lets them in)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if depth > 64:
        return True  # deeper is refused when the result is kept
    if isinstance(value, dict):
        return all(_finite(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v, depth + 1) for v in value)
    return True


Reason = Annotated[str | None, Field(max_length=1000, pattern=NO_NUL)]
"""Why, as the person wrote it: kept in the ledger's text columns (so no NUL, which
PostgreSQL refuses: an answer whose reason holds one is 422, not a database error)."""
ExpiresIn = Annotated[float | None, Field(
    gt=0, allow_inf_nan=False,
    description="Seconds the approval stays usable (default one day); null: no expiry.")]


class AnswerBody(BaseModel):
    """An approval or denial: the arguments shown, why, and how long an approval lasts."""

    model_config = ConfigDict(extra="forbid")
    args_hash: ArgsHash
    reason: Reason = None
    expires_in: ExpiresIn = DEFAULT_APPROVAL_TTL
    grant: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9_.:-]{1,64}$",
        description="Approve: also give this grant, one of the options the call's approve "
                    "rule offers (GET /api/calls/{ref}/approval lists them).")


class ApproveBody(AnswerBody):
    """An approval, perhaps with an edit: editable field paths (the call's ``editable``)
    to their new JSON values. ``args_hash`` is still what was shown: the edit and the
    approval apply only to those arguments (412 otherwise)."""

    edit: dict[str, Any] | None = Field(
        default=None, max_length=64,
        description="Editable argument fields and their new JSON values (edit then approve).")


class ResolveBody(BaseModel):
    """What really happened to a call in doubt, for the arguments shown."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    args_hash: ArgsHash
    as_: Literal["succeeded", "failed", "not-applied"] = Field(alias="as")
    result: Any = None
    reason: Reason = None

    @field_validator("result")
    @classmethod
    def _json_numbers(cls, value: Any) -> Any:
        if not _finite(value):
            raise ValueError("NaN and Infinity are not JSON numbers")
        return value


After = Annotated[int | None, Query(ge=0, le=MAX_ROW_ID,
                                    description="the last `ref` of the previous page")]
Limit = Annotated[int, Query(ge=1, le=500, description="calls on a page (default 100)")]


def _paged(found: list[CallDetails], response: Response, path: str,
           limit: int) -> list[dict[str, Any]]:
    """A page of calls with their details; a full page links to the next one (RFC 8288
    ``Link: <...?after=REF>; rel="next"``), so the body stays the list it always was."""
    if len(found) == limit:
        response.headers["Link"] = (f'<{path}?after={found[-1].call.row_id}&limit={limit}>; '
                                    'rel="next"')
    return [call_json(d) for d in found]


@router.get("/approvals", summary="Calls waiting for approval, with their details, a page "
                                  "at a time in `ref` order (`Link: rel=next`)")
def approvals(op: Op, service: Service, response: Response, after: After = None,
              limit: Limit = DETAILS_PAGE) -> list[dict[str, Any]]:
    return _paged(service.pending(after=after, limit=limit), response, "/api/approvals",
                  limit)


@router.get("/inbox", summary="Waiting (or in-doubt) calls across tasks, a keyset page "
                              "at a time, with counts by tool and rule")
def inbox_page(op: Op, service: Service, request: Request) -> dict[str, Any]:
    """The inbox's list as JSON: the same query parameters as ``/inbox`` (``state``,
    ``tool``, ``task``, ``rule``, ``age``, ``q``, ``mine``, ``answered``, ``sort``,
    ``after``, ``before``, ``limit``); ``next``: the ``after`` of the next page; each
    row's ``may_*``: what this operator may do to it (``_listed``)."""
    from datetime import UTC, datetime

    from agent_gate.serve.listing import ListView

    view = ListView.read(request.query_params)
    now = datetime.now(UTC)
    rows, counts = service.inbox(view.query(op, now, **service.mine(op),
                                            limit=view.limit + 1))
    more = len(rows) > view.limit and view.before is None
    rows = rows[-view.limit:] if view.before is not None else rows[:view.limit]
    return {"rows": [_listed(service, op, r) for r in rows],
            "counts": counts.to_dict(), "next": rows[-1].ref if more and rows else None}


def _listed(service: InboxService, op: Operator, row: InboxRow) -> dict[str, Any]:
    """A listed call and what ``op`` may do to it (``InboxService.rights``:
    ``may_approve``, ``may_deny``, ``may_resolve``, and ``may_answer``, any of them,
    what ``mine=1`` keeps; ``not_yours``: why not approve, in words): every operator
    reads the whole list, as the inbox shows it."""
    shown = row.to_dict()
    return {**shown, **service.rights(op, shown, row.principal).to_dict()}


@router.get("/in-doubt", summary="Calls in doubt, with their details, a page at a time "
                                 "in `ref` order (`Link: rel=next`)")
def in_doubt(op: Op, service: Service, response: Response, after: After = None,
             limit: Limit = DETAILS_PAGE) -> list[dict[str, Any]]:
    return _paged(service.in_doubt(after=after, limit=limit), response, "/api/in-doubt",
                  limit)


@router.get("/calls", summary="Find one call by its task and call id (both in the query)")
def find_call(op: Op, service: Service, call: Name,
              task: Annotated[str | None, Query(min_length=1, max_length=255,
                                                pattern=NO_NUL)] = None) -> dict[str, Any]:
    return _shown(service, service.find(call, task))


@router.get("/calls/{ref}", summary="Everything recorded about one call (call show)")
def call_by_ref(ref: Ref, op: Op, service: Service) -> dict[str, Any]:
    return _shown(service, service.details(ref))


def _shown(service: InboxService, details: CallDetails) -> dict[str, Any]:
    """One call as the API shows it, with the fields a person may edit before approving."""
    return {**call_json(details), "editable": list(service.editable(details.call))}


@router.post("/calls/{ref}/approve", summary="Approve a waiting call, as it was shown")
def approve(ref: Ref, body: ApproveBody, op: Op, service: Service) -> dict[str, Any]:
    return service.approve(op, OperatorAnswer(ref, body.args_hash, body.reason, body.expires_in,
                                              grant=body.grant, edit=body.edit))


@router.get("/calls/{ref}/approval",
            summary="A waiting call's quorum progress and the grants an approver may give")
def approval_state(ref: Ref, op: Op, service: Service) -> dict[str, Any]:
    state = service.approval_state(ref)
    if state is None:
        raise HTTPException(409, "the call does not wait for approval under a policy file")
    return state


class RevokeBody(BaseModel):
    """Why a grant is ended (recorded)."""

    model_config = ConfigDict(extra="forbid")
    reason: Reason = None


@router.get("/grants", summary="Grants approvers gave, newest first")
def list_grants(op: Op, service: Service,
                task: Annotated[str | None, Query(max_length=255, pattern=NO_NUL)] = None,
                active: bool = False) -> list[dict[str, Any]]:
    return [g.to_dict() for g in service.grants(task_id=task, active=active)]


@router.post("/grants/{grant_id}/revoke", summary="End a grant now (audited)")
def revoke_grant(grant_id: Annotated[int, Path(ge=1, le=MAX_ROW_ID)], body: RevokeBody,
                 op: Op, service: Service) -> dict[str, Any]:
    return service.revoke_grant(op, grant_id, body.reason).to_dict()


@router.post("/calls/{ref}/deny", summary="Deny a waiting call, as it was shown: it never runs")
def deny(ref: Ref, body: AnswerBody, op: Op, service: Service) -> dict[str, Any]:
    return service.deny(op, OperatorAnswer(ref, body.args_hash, body.reason))


class AnswerItem(BaseModel):
    """One call of a bulk answer: its ``ref`` and the ``args_hash`` it was shown with."""

    model_config = ConfigDict(extra="forbid")
    ref: int = Field(ge=1, le=MAX_ROW_ID, strict=True,
                     description="The call's `ref`: the ledger's id for it, as listed")
    args_hash: ArgsHash


class AnswersBody(BaseModel):
    """One answer to many waiting calls (``POST /api/answers``): approve or deny, why,
    how long the approvals last, and the calls, each with the hash it was shown with.
    No edit and no grant: those are one call's answers."""

    model_config = ConfigDict(extra="forbid")
    decision: Literal["approve", "deny"]
    items: list[AnswerItem] = Field(
        min_length=1, max_length=MAX_PICKS,
        description=f"The calls answered, at most {MAX_PICKS}, each `ref` once.")
    reason: Reason = None
    expires_in: ExpiresIn = DEFAULT_APPROVAL_TTL

    @field_validator("items")
    @classmethod
    def _each_once(cls, items: list[AnswerItem]) -> list[AnswerItem]:
        """A ref named twice is refused whole: one person's answer counts once (a
        quorum's too), and which of two hashes was meant is not ours to guess."""
        first: dict[int, int] = {}
        for index, item in enumerate(items):
            seen = first.setdefault(item.ref, index)
            if seen != index:
                raise PydanticCustomError(
                    "duplicate_ref", "items[{index}] names the same ref as items[{seen}]: "
                    "name each call once", {"index": index, "seen": seen})
        return items


@router.post("/answers", summary="Approve or deny many waiting calls, each as it was shown: "
                                 "one result per item, in order")
def answers(body: AnswersBody, op: Op, service: Service) -> dict[str, Any]:
    """Each item is answered as ``/calls/{ref}/approve`` or ``/deny`` would answer it
    alone (the same rights, the same ``args_hash`` binding, its own transaction, its
    refusal audited): one refused never keeps the others from being answered. Each
    result: ``outcome`` ``answered`` or ``refused``, ``status`` (the single route's:
    200, 403, 404, 409, 412), and for a refusal ``error`` (the type the single route's
    body names) and ``detail``."""
    done = service.answer_each(op, body.decision, [
        OperatorAnswer(i.ref, i.args_hash, body.reason, body.expires_in) for i in body.items])
    results = [{"ref": r.ref, "call_id": r.call_id, "tool": r.tool,
                "outcome": "answered" if r.done else "refused", "status": r.status,
                **({} if r.done else {"error": r.error, "detail": r.message})}
               for r in done]
    return {"decision": body.decision, "answered": sum(r.done for r in done),
            "refused": sum(not r.done for r in done), "results": results}


@router.post("/calls/{ref}/resolve", summary="Settle a call in doubt, as it was shown")
def resolve(ref: Ref, body: ResolveBody, op: Op, service: Service) -> dict[str, Any]:
    return service.resolve(op, OperatorAnswer(ref, body.args_hash, body.reason), body.as_,
                           body.result)


class RevealBody(BaseModel):
    """Which redacted argument field to read in clear (its path, as the call lists it)."""

    model_config = ConfigDict(extra="forbid")
    field: str = Field(min_length=1, max_length=200, pattern=NO_NUL)


@router.post("/calls/{ref}/reveal",
             summary="One redacted argument field in clear, for an operator with rights "
                     "on the tool (audited; never for a field the policy marks reveal: never)")
def reveal_field(ref: Ref, body: RevealBody, op: Op, service: Service) -> dict[str, Any]:
    return service.reveal(op, ref, body.field).to_dict()


@router.get("/tasks", summary="Tasks, newest activity first, a page at a time")
def tasks(op: Op, service: Service,
          after: Annotated[str | None, Query(description="the last task of the previous page",
                                             max_length=255, pattern=NO_NUL)] = None,
          state: CallState | None = None,
          limit: Annotated[int, Query(ge=1, le=500)] = 50) -> list[dict[str, Any]]:
    return service.tasks(after=after, state=state.value if state else None, limit=limit)


@router.get("/timeline", summary="A task's calls and its timeline (the task in the query)")
def task(task: Name, op: Op, service: Service) -> dict[str, Any]:
    return service.timeline(task)


@router.get("/audit", summary="The audit trail, a page at a time (by seq)")
def audit(op: Op, service: Service,
          after: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
          task: Annotated[str | None, Query(max_length=255, pattern=NO_NUL)] = None,
          limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[dict[str, Any]]:
    return service.audit(after=after, task_id=task, limit=limit)


@router.get("/audit/head", summary="The newest checkpoint of the audit trail")
def audit_head(op: Op, service: Service) -> dict[str, Any]:
    return service.head()


@router.get("/audit/verify", summary="Check every audit hash chain and checkpoint")
def audit_verify(op: Op, service: Service) -> dict[str, Any]:
    return service.verify()
