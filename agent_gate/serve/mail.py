"""E-mail: tell people over SMTP that a call waits for them, with a link to its page.

Configured by the ``mail:`` list of ``agent-gate serve --config FILE``::

    mail:
      - name: approvers                   # the cursor's name in the ledger (mail:NAME)
        host: smtp.example.com
        port: 587
        starttls: true
        username_env: AGENT_GATE_SMTP_USER  # optional; the values from the environment
        password_env: AGENT_GATE_SMTP_PASSWORD
        sender: agent-gate@example.com
        to: [oncall@example.com]
        link_secret_env: AGENT_GATE_LINK_SECRET
        events: [awaiting_approval, escalated, in_doubt]
        roles: [finance]                  # optional: escalations to these roles only

A message names the tool, the task and call ids, the state and the rules, and links
to the call's page: never an argument value (a mailbox is read by more people and
kept longer than the ledger). The link carries ``sig``, the HMAC-SHA256 of the task
and call ids under the link secret, which the inbox checks (``link_signature``): a
link in a mail that this server did not sign is refused, so a forged notice cannot
send an approver to a call of the forger's choosing under this server's name. The
person still logs in; the link grants nothing.

Sent with the standard library's ``smtplib`` (no dependency; the server is reached
from a worker thread, as the webhooks are). Delivery is at least once from the
outbox, like the webhooks': the cursor ``mail:NAME`` moves only after the server
accepted the message, and a failure is retried with backoff.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import smtplib
from email.message import EmailMessage
from email.utils import make_msgid
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from agent_gate.ledger.views import outbox

__all__ = ["MailEndpoint", "link_signature", "message", "send"]


class MailEndpoint(BaseModel):
    """One SMTP route to people."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,94}$")  # mail:NAME fits 100
    host: str = Field(min_length=1, max_length=255)
    port: int = Field(default=587, ge=1, le=65535)
    starttls: bool = True
    username_env: str | None = None
    password_env: str | None = None
    sender: str = Field(min_length=3, max_length=255, pattern=r"^[^\r\n]+@[^\r\n]+$")
    to: tuple[str, ...] = Field(min_length=1)
    link_secret_env: str = Field(min_length=1)
    events: tuple[str, ...] = ("awaiting_approval", "escalated", "in_doubt")
    roles: tuple[str, ...] = ()
    """Escalations to these roles only (``outbox.wanted``); empty: every role. Each must
    be one the policy escalates to (``webhooks.check_route_roles``)."""
    backoff: float = Field(default=1.0, gt=0)
    max_backoff: float = Field(default=300.0, gt=0)
    poll: float = Field(default=1.0, gt=0)
    timeout: float = Field(default=30.0, gt=0)


def link_signature(secret: bytes, task_id: str, call_id: str) -> str:
    """The ``sig`` of a link to a call's page: HMAC-SHA256 of its task and call ids."""
    data = task_id.encode("utf-8", "surrogatepass") + b"\x00" + call_id.encode(
        "utf-8", "surrogatepass")
    return hmac.new(secret, data, hashlib.sha256).hexdigest()


_SUBJECTS = {"awaiting_approval": "waits for your approval", "in_doubt": "is in doubt",
             "resolved": "was answered"}


def _printable(text: str, limit: int = 120) -> str:
    """A model-chosen id as one line of plain text (no header injection, bounded)."""
    out = "".join(c if c.isprintable() else "?" for c in text)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def message(endpoint: MailEndpoint, notice: outbox.Notice, base_url: str,
            secret: bytes) -> EmailMessage:
    """The mail for one notice: ids, tool, state, rules and the signed link; no values."""
    msg = EmailMessage()
    tool = _printable(notice.tool or "a call")
    what = (f"was escalated to {_printable(notice.role or '?', 64)}"
            if notice.kind == "escalated" else _SUBJECTS.get(notice.kind, notice.kind))
    msg["Subject"] = f"[agent-gate] {tool} {what}"
    msg["From"] = endpoint.sender
    msg["To"] = ", ".join(endpoint.to)
    msg["Message-ID"] = make_msgid(domain="agent-gate")
    msg["X-Agent-Gate-Event-Id"] = str(notice.seq)
    lines = [f"Tool:  {tool}", f"Task:  {_printable(notice.task_id)}",
             f"Call:  {_printable(notice.call_id or '-')}", f"State: {notice.state or '-'}",
             f"Rules: {', '.join(_printable(r, 80) for r in notice.rule_ids) or '-'}", ""]
    if notice.kind == "escalated":  # the deadline passed: who may answer now
        lines[-1:-1] = [f"Role:  {_printable(notice.role or '?', 64)} (only its holders "
                        "may answer the call now)"]
    if notice.call_id is not None:
        query = (f"task={quote(notice.task_id, safe='')}&call={quote(notice.call_id, safe='')}"
                 f"&sig={link_signature(secret, notice.task_id, notice.call_id)}")
        lines.append(f"Open it: {base_url.rstrip('/')}/inbox/call?{query}")
    lines.append("")
    lines.append("The arguments are not in this mail: read them on the call's page.")
    msg.set_content("\n".join(lines))
    return msg


def send(endpoint: MailEndpoint, msg: EmailMessage) -> None:
    """Hand one message to the SMTP server (raises ``smtplib.SMTPException``/``OSError``)."""
    with smtplib.SMTP(endpoint.host, endpoint.port, timeout=endpoint.timeout) as smtp:
        if endpoint.starttls:
            smtp.starttls()
        if endpoint.username_env and endpoint.password_env:
            smtp.login(os.environ[endpoint.username_env], os.environ[endpoint.password_env])
        smtp.send_message(msg)
