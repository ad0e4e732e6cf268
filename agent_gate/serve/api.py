"""The JSON API of ``agent-gate serve``: ``/api/...``, bearer tokens only.

Its schema is served at ``/openapi.json``. Every route needs an operator's token
(``Authorization: Bearer TOKEN``); a missing or wrong one is 401, an answer outside
the operator's rights 403, and each refusal is in the audit chain.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from agent_gate.gate import DEFAULT_APPROVAL_TTL
from agent_gate.ledger.operators import Operator
from agent_gate.serve.service import Answer, InboxService

__all__ = ["AnswerBody", "ResolveBody", "client_of", "router"]

router = APIRouter(prefix="/api")
_bearer = HTTPBearer(auto_error=False, description="An operator token (`agent-gate operator add`)")


def service_of(request: Request) -> InboxService:
    service: InboxService = request.app.state.service
    return service


def client_of(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def api_operator(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Operator:
    """The operator whose bearer token came with the request; else 401, audited."""
    service = service_of(request)
    op = service.authenticate(creds.credentials) if creds is not None else None
    if op is None:
        service.audit_refusal(
            actor="anonymous", event="api_auth",
            detail={"path": request.url.path, "method": request.method,
                    "client": client_of(request),
                    "reason": "no bearer token" if creds is None else "unknown token"})
        raise HTTPException(401, "an operator token is required (Authorization: Bearer TOKEN)",
                            headers={"WWW-Authenticate": "Bearer"})
    return op


Op = Annotated[Operator, Depends(api_operator)]
Service = Annotated[InboxService, Depends(service_of)]


class AnswerBody(BaseModel):
    """An approval or denial: the call's task, why, and how long an approval lasts."""

    model_config = ConfigDict(extra="forbid")
    task: str = Field(min_length=1, max_length=255)
    reason: str | None = Field(default=None, max_length=1000)
    expires_in: float | None = Field(
        default=DEFAULT_APPROVAL_TTL, gt=0,
        description="Seconds the approval stays usable (default one day); null: no expiry.")


class ResolveBody(BaseModel):
    """What really happened to a call in doubt."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    task: str = Field(min_length=1, max_length=255)
    as_: Literal["succeeded", "failed", "not-applied"] = Field(alias="as")
    result: Any = None
    reason: str | None = Field(default=None, max_length=1000)


@router.get("/approvals", summary="Calls waiting for approval, with their details")
def approvals(op: Op, service: Service) -> list[dict[str, Any]]:
    return [d.to_dict() for d in service.pending()]


@router.get("/in-doubt", summary="Calls in doubt, with their details")
def in_doubt(op: Op, service: Service) -> list[dict[str, Any]]:
    return [d.to_dict() for d in service.in_doubt()]


@router.get("/calls/{call_id}", summary="Everything recorded about one call (call show)")
def call(call_id: str, op: Op, service: Service,
         task: Annotated[str | None, Query(max_length=255)] = None) -> dict[str, Any]:
    return service.details(call_id, task).to_dict()


@router.post("/calls/{call_id}/approve", summary="Approve a waiting call")
def approve(call_id: str, body: AnswerBody, op: Op, service: Service) -> dict[str, Any]:
    return service.approve(op, Answer(body.task, call_id, body.reason, body.expires_in))


@router.post("/calls/{call_id}/deny", summary="Deny a waiting call: it never runs")
def deny(call_id: str, body: AnswerBody, op: Op, service: Service) -> dict[str, Any]:
    return service.deny(op, Answer(body.task, call_id, body.reason))


@router.post("/calls/{call_id}/resolve", summary="Settle a call in doubt")
def resolve(call_id: str, body: ResolveBody, op: Op, service: Service) -> dict[str, Any]:
    return service.resolve(op, Answer(body.task, call_id, body.reason), body.as_, body.result)


@router.get("/tasks", summary="Tasks, newest activity first, a page at a time")
def tasks(op: Op, service: Service,
          after: Annotated[str | None, Query(description="the last task of the previous page")]
          = None,
          state: str | None = None,
          limit: Annotated[int, Query(ge=1, le=500)] = 50) -> list[dict[str, Any]]:
    return service.tasks(after=after, state=state, limit=limit)


@router.get("/tasks/{task_id}", summary="A task's calls and its timeline")
def task(task_id: str, op: Op, service: Service) -> dict[str, Any]:
    return service.timeline(task_id)


@router.get("/audit", summary="The audit trail, a page at a time (by seq)")
def audit(op: Op, service: Service,
          after: Annotated[int | None, Query(ge=0)] = None,
          task: str | None = None,
          limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[dict[str, Any]]:
    return service.audit(after=after, task_id=task, limit=limit)


@router.get("/audit/head", summary="The newest checkpoint of the audit trail")
def audit_head(op: Op, service: Service) -> dict[str, Any]:
    return service.head()


@router.get("/audit/verify", summary="Check every audit hash chain and checkpoint")
def audit_verify(op: Op, service: Service) -> dict[str, Any]:
    return service.verify()
