"""After a click in Slack: the original message replaced by who answered and how.

Slack hands each interaction a ``response_url`` (valid 30 minutes, five uses) that
replaces the message the button was in. The click's answer is committed first; then
an entry ``operator_slack_reply`` is appended to the audit trail under the operator's
name, holding the route, the call's ``ref``, the verb, the Slack user and the
``response_url`` sealed (AES-256-GCM under a key derived from the route's signing
secret, bound to the route and the ``ref``): the trail is read by every operator and
exported in bundles, and a live ``response_url`` lets whoever holds it post into the
channel as the app. The Slack route's reply follower (``webhooks.Notifier``, cursor
``reply:NAME``) reads the trail after its cursor, opens the URL, POSTs the
replacement with ``slack-sdk``'s ``WebhookClient`` (``replace_original: true``, the
buttons gone, never an argument value) and only then moves the cursor: at least
once, as every notice. A failure (network, 5xx, 429) is retried with backoff until
the URL's 30 minutes are over; Slack's own refusal of the URL (``expired_url``,
``used_url``: any other 4xx) is final.

A click the server refused (not an operator, outside their rights, not an approver
the policy counts, an escalation's role they do not hold, changed arguments) waits in
the same entry with the verb ``refused`` and why, in the judge's own words: its reply
is ephemeral (``response_type: ephemeral``, ``replace_original: false``), seen by the
clicker alone, and the message stays as it was for those who may answer it. Slack
reads nothing but the status of the HTTP answer to a ``block_actions`` click, so the
``response_url`` is the only way back to the person who clicked.

Only a ``response_url`` under the route's ``response_url_prefix`` (Slack's
``https://hooks.slack.com/``) is kept: the payload is signed by Slack, and the
server still posts nowhere else. The gap: a crash after the answer committed and
before its reply entry was appended leaves the message as it was (the call is
answered, its page says so).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from urllib.parse import quote

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agent_gate.ledger.audit import AuditRecord

__all__ = ["EVENT", "REPLY_WINDOW", "ReplyOutcome", "SlackReply", "inert_text", "open_reply",
           "seal", "send"]

EVENT = "operator_slack_reply"
"""The audit event a reply waits in (``record_action``'s ``operator_`` + ``slack_reply``)."""
REPLY_WINDOW = timedelta(minutes=30)
"""How long Slack keeps a ``response_url`` usable."""
_INFO = b"agent-gate slack response_url v1"


class ReplyOutcome(StrEnum):
    """What one POST to a ``response_url`` came to."""

    DONE = "done"
    RETRY = "retry"
    """Not reached, a 5xx or a 429: try again while the URL lives."""
    REFUSED = "refused"
    """Slack refused the URL or the message for good (a 4xx): nothing more to do."""


@dataclass(frozen=True, slots=True)
class SlackReply:
    """One message to replace: where, and what it now says."""

    url: str
    text: str
    blocks: list[dict[str, Any]]
    until: datetime
    replace: bool = True
    """Replace the message clicked; False: an ephemeral note to the clicker alone (a
    refused click), the message left for those who may answer."""


def _key(secret: str) -> bytes:
    return hmac.new(secret.encode(), _INFO, hashlib.sha256).digest()


def _aad(route: str, ref: int) -> bytes:
    return f"{route}\x00{ref}".encode()


def seal(secret: str, route: str, ref: int, url: str) -> str:
    """``url`` sealed for the trail, openable only with the route's signing secret."""
    nonce = secrets.token_bytes(12)
    sealed = AESGCM(_key(secret)).encrypt(nonce, url.encode(), _aad(route, ref))
    return base64.urlsafe_b64encode(nonce + sealed).decode()


def _unseal(secret: str, route: str, ref: int, text: str) -> str | None:
    try:
        raw = base64.urlsafe_b64decode(text.encode())
        return AESGCM(_key(secret)).decrypt(raw[:12], raw[12:], _aad(route, ref)).decode()
    except (InvalidTag, ValueError, UnicodeDecodeError):
        return None  # another secret (rotated since), or not ours


def inert_text(value: str, limit: int = 150) -> str:
    """A model-chosen id as mrkdwn-inert text: no mentions, links or formatting. Here,
    below ``slack``, because both the message and its replacement render with it."""
    out = "".join(c if c.isprintable() else "?" for c in value)
    for ch, esc in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;")):
        out = out.replace(ch, esc)
    out = out.replace("`", "'")
    return out if len(out) <= limit else out[: limit - 1] + "…"


def open_reply(route: Any, entry: AuditRecord, base_url: str) -> SlackReply | None:
    """The reply an audit entry asks for on ``route`` (a ``SlackRoute``), or None (not
    a reply, another route's, past its window, or sealed under another secret)."""
    detail = entry.detail or {}
    if entry.event != EVENT or detail.get("route") != route.name:
        return None
    ref, sealed = detail.get("ref"), detail.get("reply")
    if not isinstance(ref, int) or not isinstance(sealed, str):
        return None
    until = (entry.at if entry.at.tzinfo else entry.at.replace(tzinfo=UTC)) + REPLY_WINDOW
    url = _unseal(os.environ.get(route.signing_secret_env, ""), route.name, ref, sealed)
    if url is None or datetime.now(UTC) >= until or not url.startswith(
            route.response_url_prefix):
        return None
    if detail.get("verb") == "refused":
        return _refused(url, until, detail)
    who = (entry.actor or "").removeprefix("operator:")
    word = "Approved" if detail.get("verb") == "approve" else "Denied (it will not run)"
    tool = inert_text(str(detail.get("tool") or "a call"))
    lines = [f"*{tool}*: {word} by *{inert_text(who, 100)}*",
             f"task `{inert_text(entry.task_id)}` · "
             f"call `{inert_text(entry.call_id or '-')}`"]
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}}]
    if entry.call_id is not None:
        query = f"task={quote(entry.task_id, safe='')}&call={quote(entry.call_id, safe='')}"
        blocks.append({"type": "actions", "block_id": f"answered-{ref}", "elements": [
            {"type": "button", "action_id": "open",
             "text": {"type": "plain_text", "text": "Open"},
             "url": f"{base_url.rstrip('/')}/inbox/call?{query}"}]})
    return SlackReply(url, f"{detail.get('tool') or 'a call'}: {word} by {who}"[:300], blocks,
                 until)


def _refused(url: str, until: datetime, detail: dict[str, Any]) -> SlackReply:
    """The ephemeral note of a refused click: why, in the judge's words (names and
    roles, never an argument value), and that nothing was answered."""
    why = inert_text(str(detail.get("why") or "refused"), 1000)
    tool = inert_text(str(detail.get("tool") or "this call"))
    text = f"Not answered: {why}"
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {
        "type": "mrkdwn", "text": f"*{tool}*: your click answered nothing.\n{why}"}}]
    return SlackReply(url, text, blocks, until, replace=False)


def send(reply: SlackReply, timeout: float = 30.0) -> ReplyOutcome:
    """POST the replacement (Slack's documented ``replace_original`` message)."""
    from slack_sdk.webhook import WebhookClient

    try:
        got = WebhookClient(reply.url, timeout=int(timeout)).send(
            text=inert_text(reply.text, 1100), blocks=reply.blocks,
            replace_original=reply.replace,
            response_type=None if reply.replace else "ephemeral")
    except OSError:
        return ReplyOutcome.RETRY
    if 200 <= got.status_code < 300:
        return ReplyOutcome.DONE
    if got.status_code == 429 or got.status_code >= 500:
        return ReplyOutcome.RETRY
    return ReplyOutcome.REFUSED
