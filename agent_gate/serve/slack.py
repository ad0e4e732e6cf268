"""Slack: a message with Approve and Deny buttons where people already are.

Configured by the ``slack:`` list of ``agent-gate serve --config FILE``::

    slack:
      - name: approvals                      # the cursor's name in the ledger (slack:NAME)
        channel: C0123456789
        token_env: AGENT_GATE_SLACK_TOKEN          # a bot token (chat:write)
        signing_secret_env: AGENT_GATE_SLACK_SIGNING_SECRET
        users: {U012ABCDEF: alice}           # Slack user id -> operator
        events: [awaiting_approval, escalated]
        roles: [finance]                     # optional: escalations to these roles only

The message (Block Kit, posted with ``slack-sdk``'s ``chat.postMessage``) names the
tool, the task and call ids and the rules, links to the call's page, and carries the
buttons; never an argument value. Everyone in the channel sees it, so it also says who
may answer, before anyone clicks: a call whose rules count only some roles' approvals
says "Needs approval by finance (2 distinct)", and an escalation (its deadline passed,
``then: {escalate: ROLE}``) says "Escalated to finance: only finance may answer" and
keeps its buttons for the role's holders, who are in the channel too.

Each button's value is the call's ``ref`` and the hash of its arguments when the
message was posted: a click answers that call for those arguments, or is refused
(changed since: 412, as everywhere else).

A click reaches ``POST /slack/interactions`` (Slack's interactivity request URL): the
request is verified with the app's signing secret (``SignatureVerifier``: the
``v0`` HMAC-SHA256 over ``v0:TIMESTAMP:BODY``, timestamps older than five minutes
refused), the Slack user is mapped to an operator through ``users`` (an unmapped
user answers nothing), and the answer goes through the same checks as the inbox's
(the operator's rights, the policy's approvers), audited under ``operator:NAME``
with the Slack user id. The message clicked is then replaced through the click's
``response_url`` by who answered and how (``slack_reply``). Delivery of the messages
and of the replacements is at least once from the outbox, as the webhooks'.
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from agent_gate.errors import AgentGateError
from agent_gate.ledger.views import outbox
from agent_gate.ledger.views.operators import Operator, actor_of
from agent_gate.policy import Policy
from agent_gate.policy.approval import requirement
from agent_gate.serve.slack_reply import inert_text, seal

if TYPE_CHECKING:  # the service imports the ledger and the gate: only its type here
    from agent_gate.serve.service import InboxService

router = APIRouter(include_in_schema=False)

__all__ = ["SlackRoute", "asked_of", "blocks", "interaction", "post", "router"]

_VALUE = re.compile(r"(approve|deny):([1-9][0-9]{0,9}):([0-9a-f]{64})")
_MAX_REF = 2**31 - 1
_ANSWERABLE = ("awaiting_approval", "escalated")
"""The notices whose message carries Approve and Deny: the call waits for a person."""


class SlackRoute(BaseModel):
    """One Slack channel people answer from."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,93}$")  # slack:NAME fits 100
    channel: str = Field(min_length=1, max_length=100)
    token_env: str = Field(min_length=1)
    signing_secret_env: str = Field(min_length=1)
    users: dict[str, str] = {}
    """Slack user id -> operator name: who a click is."""
    events: tuple[str, ...] = ("awaiting_approval",)
    roles: tuple[str, ...] = ()
    """Escalations to these roles only (``outbox.wanted``); empty: every role. Each must
    be one the policy escalates to (``webhooks.check_route_roles``)."""
    api_url: str = Field(default="https://slack.com/api/", pattern=r"^https?://")
    backoff: float = Field(default=1.0, gt=0)
    max_backoff: float = Field(default=300.0, gt=0)
    poll: float = Field(default=1.0, gt=0)
    response_url_prefix: str = Field(default="https://hooks.slack.com/",
                                     pattern=r"^https?://[^/]+/")
    """Where a click's ``response_url`` must point for the answer to replace the
    message (``slack_reply``); any other is not kept."""


def asked_of(policy: Policy | None, tool: str | None, rule_ids: tuple[str, ...]) -> str | None:
    """Who the rules that sent a call to a person count approvals from, when they name
    roles ("Needs approval by finance (2 distinct)"); None when anyone with the tool's
    rights may answer, or the server runs without a policy file (it knows no roles)."""
    if policy is None or tool is None:
        return None
    need = requirement(policy.document, tool, rule_ids)
    if not need.roles:
        return None
    who = " or ".join(inert_text(r, 64) for r in need.roles)
    return f"Needs approval by {who}" + (f" ({need.min} distinct)" if need.min > 1 else "")


def blocks(notice: outbox.Notice, ref: int | None, args_hash: str | None,
           base_url: str, asked: str | None = None) -> list[dict[str, Any]]:
    """The Block Kit message for one notice; buttons when the call waits for a person
    (``asked``: who may answer it, ``asked_of``)."""
    tool = inert_text(notice.tool or "a call")
    if notice.kind == "escalated":
        role = inert_text(notice.role or "?", 64)
        what = f"was escalated: its approval deadline passed\n*Escalated to {role}: only " \
               f"{role} may answer*"
    else:
        what = "waits for approval" if notice.kind == "awaiting_approval" else \
            notice.kind.replace("_", " ")
    lines = [f"*{tool}* {what}",
             f"task `{inert_text(notice.task_id)}` · "
             f"call `{inert_text(notice.call_id or '-')}`",
             f"rules: {', '.join(inert_text(r, 80) for r in notice.rule_ids) or '-'}"]
    if asked is not None and notice.kind in _ANSWERABLE:
        lines.append(f"*{asked}*")
    out: list[dict[str, Any]] = [{"type": "section",
                                  "text": {"type": "mrkdwn", "text": "\n".join(lines)}}]
    elements: list[dict[str, Any]] = []
    if notice.call_id is not None:
        query = f"task={quote(notice.task_id, safe='')}&call={quote(notice.call_id, safe='')}"
        elements.append({"type": "button", "action_id": "open",
                         "text": {"type": "plain_text", "text": "Open"},
                         "url": f"{base_url.rstrip('/')}/inbox/call?{query}"})
    if notice.kind in _ANSWERABLE and ref is not None and args_hash is not None:
        elements += [
            {"type": "button", "action_id": "approve", "style": "primary",
             "text": {"type": "plain_text", "text": "Approve"},
             "value": f"approve:{ref}:{args_hash}"},
            {"type": "button", "action_id": "deny", "style": "danger",
             "text": {"type": "plain_text", "text": "Deny"},
             "value": f"deny:{ref}:{args_hash}"}]
    if elements:
        out.append({"type": "actions", "block_id": f"{notice.kind}-{ref or 0}",
                    "elements": elements})
    return out


def interaction(route: SlackRoute, body: bytes, headers: dict[str, str]
                ) -> tuple[int, str | None, tuple[str, int, str, str | None] | None]:
    """A click as Slack sent it: (status, why refused, (slack user, ref, ``verb:hash``,
    the ``response_url`` if it points under the route's prefix)). Verified first;
    nothing of an unverified request is read."""
    from slack_sdk.signature import SignatureVerifier

    secret = os.environ.get(route.signing_secret_env, "")
    if not secret or not SignatureVerifier(secret).is_valid_request(body, headers):
        return 401, "the request is not signed with this app's signing secret", None
    try:
        payload = json.loads(parse_qs(body.decode("utf-8"))["payload"][0])
        user = str(payload["user"]["id"])
        action = payload["actions"][0]
        value = str(action["value"])
    except (KeyError, IndexError, TypeError, ValueError, UnicodeDecodeError):
        return 400, "not a block_actions payload", None
    m = _VALUE.fullmatch(value)
    if payload.get("type") != "block_actions" or m is None or int(m.group(2)) > _MAX_REF:
        return 400, "not one of agent-gate's buttons", None
    reply = payload.get("response_url")
    if not isinstance(reply, str) or len(reply) > 2000 or not reply.startswith(
            route.response_url_prefix):
        reply = None
    return 200, None, (user, int(m.group(2)), f"{m.group(1)}:{m.group(3)}", reply)


def post(route: SlackRoute, notice: outbox.Notice, ref: int | None, args_hash: str | None,
         base_url: str, asked: str | None = None) -> None:
    """Post the notice's message (raises ``SlackApiError`` or ``OSError`` on failure)."""
    from slack_sdk import WebClient

    client = WebClient(token=os.environ[route.token_env], base_url=route.api_url, timeout=30)
    fallback = f"{notice.tool or 'a call'} {notice.kind.replace('_', ' ')}"
    if notice.kind == "escalated":
        fallback += f" to {notice.role or '?'}: only its holders may answer"
    client.chat_postMessage(channel=route.channel, text=inert_text(fallback, 300),
                            blocks=blocks(notice, ref, args_hash, base_url, asked))


@router.post("/slack/interactions/{name}")
async def slack_interaction(request: Request, name: str) -> JSONResponse:
    """Slack's interactivity request URL for the route ``name``: a button clicked."""
    routes = {r.name: r for r in request.app.state.slack_routes}
    route = routes.get(name)
    if route is None:
        return JSONResponse({"text": "no such Slack route"}, status_code=404)
    body = await request.body()
    headers = {k.lower(): v for k, v in request.headers.items()}
    return await run_in_threadpool(_answer, request, route, body, headers)


def _answer(request: Request, route: SlackRoute, body: bytes,
            headers: dict[str, str]) -> JSONResponse:
    from agent_gate.serve.service import OperatorAnswer, status_of

    service: InboxService = request.app.state.service
    status, why, click = interaction(route, body, headers)
    if click is None:
        service.audit_refusal(actor="slack", event="slack_answer",
                              detail={"route": route.name, "reason": why or "refused"})
        return JSONResponse({"text": why}, status_code=status)
    user, ref, verb_hash, reply = click
    verb, _, args_hash = verb_hash.partition(":")
    op = _operator(service.operators.list(), route.users.get(user))
    if op is None:
        why = "you are not an agent-gate operator (this Slack user is mapped to none)"
        service.audit_refusal(actor=f"slack:{user[:40]}", event="slack_answer",
                              detail={"route": route.name, "ref": ref,
                                      "reason": "this Slack user is no operator"})
        _tell(service, route, f"slack:{user[:40]}", ref, user, reply, verb="refused", why=why)
        return JSONResponse({"response_type": "ephemeral",
                             "text": "You are not an agent-gate operator: nothing answered."})
    answer = OperatorAnswer(ref, args_hash, f"from Slack (user {user[:40]})")
    try:
        done = service.approve(op, answer) if verb == "approve" else service.deny(op, answer)
    except AgentGateError as exc:  # audited where it was judged (``gate.desk``, the service)
        refused = service.located(ref)
        _tell(service, route, actor_of(op.name), ref, user, reply, verb="refused",
              why=f"{verb} refused ({status_of(exc)}): {exc}",
              tool=refused.tool if refused else None)
        return JSONResponse({"response_type": "ephemeral", "replace_original": False,
                             "text": inert_text(f"Refused ({status_of(exc)}): {exc}", 1000)})
    # The message is replaced from the outbox (``slack_reply``).
    _tell(service, route, actor_of(op.name), ref, user, reply, verb=verb,
          tool=done.get("tool"))
    word = "Approved" if verb == "approve" else "Denied"
    return JSONResponse({"response_type": "in_channel", "replace_original": False,
                         "text": f"{word} by {op.name}: "
                                 f"{inert_text(str(done.get('call_id')))}"})


def _tell(service: InboxService, route: SlackRoute, actor: str, ref: int, user: str,
          reply: str | None, *, verb: str, why: str | None = None,
          tool: Any = None) -> None:
    """Have the clicker's ``response_url`` told what became of the click, from the
    outbox (``slack_reply``): the message replaced by the answer, or an ephemeral note
    of why it was refused. Nothing without a ``response_url`` under the route's prefix."""
    if reply is None:
        return
    detail = {"route": route.name, "ref": ref, "verb": verb, "user": user[:40],
              "tool": tool,
              "reply": seal(os.environ.get(route.signing_secret_env, ""), route.name, ref,
                            reply)}
    if why is not None:
        detail["why"] = why[:1000]
    service.slack_reply(actor, ref, detail=detail)


def _operator(operators: list[Operator], name: str | None) -> Operator | None:
    return next((o for o in operators if o.name == name), None) if name else None
