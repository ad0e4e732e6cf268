"""Webhooks: tell people a call waits for them, was escalated to a role, is in doubt,
or was resolved.

Configured by the ``notify:`` list of ``agent-gate serve --config FILE``::

    base_url: https://gate.example.com      # for the links in each event
    checkpoint_every: 600                   # seconds between audit checkpoints; null: none
    checkpoint_signing_key: /etc/agent-gate/ledger.key   # optional: sign them (C2SP)
    checkpoint_publish: [/mnt/witness/]     # optional: and hand them to witnesses
    sweep_every: 10                         # seconds between approval-deadline sweeps; null: none
    notify:
      - name: ops-chat                      # the cursor's name in the ledger
        url: https://hooks.example.com/agent-gate
        secret_env: AGENT_GATE_WEBHOOK_SECRET   # the HMAC key: never in the file
        events: [awaiting_approval, escalated, in_doubt, resolved]
        roles: [finance]                    # optional: escalations to these roles only

A route's ``roles:`` (on ``notify:``, ``mail:`` and ``slack:`` alike) must name roles
the policy escalates to (``then: {escalate: ROLE}``): an ``escalated`` notice names no
other, so a route for any other role (a typo, or an approver or quorum role no rule
escalates to) would never hear of one, and is refused at start
(``check_route_roles``: ``UnknownRouteRole``, naming the route and the role, listing
the policy's). A server run without
``--policy`` knows no roles and checks none.

Each event is one POST of JSON (ids, tool, rule ids, state, links: never argument
values) with ``X-Agent-Gate-Timestamp`` (Unix seconds) and ``X-Agent-Gate-Signature:
sha256=HEX``, the HMAC-SHA256 of ``TIMESTAMP.BODY`` under the secret: a receiver
recomputes it and refuses old timestamps. Delivery is at least once and in order per
endpoint: the audit trail is the outbox (``ledger.views.outbox``), a failed POST is retried
with exponential backoff, and the endpoint's cursor moves only after a 2xx.

HTTP witnesses (``agent-gate audit checkpoint --publish URL``, ``checkpoint_publish``)
are served the same way: the signed checkpoints the ledger keeps are their outbox
(``outbox.signed_after``), each witness has a cursor (``witness:`` and a digest of its
URL), every checkpoint after it is POSTed oldest first as ``text/plain`` with
``X-Agent-Gate-Event: checkpoint``, ``X-Agent-Gate-Event-Id: CHECKPOINT_ID`` and the
same signature under ``$AGENT_GATE_WITNESS_SECRET``, and the cursor moves only after
a 2xx. One that fails after its tries stays in the outbox and is sent again, first, at
the next publish (at least once, in order; a receiver deduplicates by the id).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import smtplib
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import yaml
from pydantic import BaseModel, ConfigDict, Field

from agent_gate.errors import EvidenceError, GateUsageError, UnknownRouteRole
from agent_gate.evidence.note import VerifierKey
from agent_gate.evidence.witness import publish
from agent_gate.ledger.audit import AuditRecord
from agent_gate.ledger.store import Ledger
from agent_gate.ledger.views import outbox
from agent_gate.policy import Policy
from agent_gate.serve import slack_reply
from agent_gate.serve.identity import IdentityConfig
from agent_gate.serve.mail import MailEndpoint, message, send
from agent_gate.serve.slack import SlackRoute, asked_of, post

__all__ = ["WITNESS_SECRET_ENV", "Endpoint", "Notifier", "ServeConfig", "check_route_roles",
           "deliver_checkpoints", "hand_to_witnesses", "load_config", "post_signed", "sign",
           "witness_name"]

WITNESS_SECRET_ENV = "AGENT_GATE_WITNESS_SECRET"
"""The HMAC secret an HTTP witness's POSTs are signed with."""


class Endpoint(BaseModel):
    """One receiver of events."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    url: str = Field(pattern=r"^https?://")
    secret_env: str = Field(min_length=1)
    events: tuple[str, ...] = outbox.EVENT_KINDS
    roles: tuple[str, ...] = ()
    """Escalations to these roles only (``outbox.wanted``); empty: every role. Each must
    be one the policy escalates to (``webhooks.check_route_roles``)."""
    backoff: float = Field(default=1.0, gt=0, description="first retry delay, seconds")
    max_backoff: float = Field(default=300.0, gt=0)
    poll: float = Field(default=1.0, gt=0, description="how often the trail is read")
    timeout: float = Field(default=10.0, gt=0)


class ServeConfig(BaseModel):
    """``agent-gate serve --config FILE``: where links point, and who to tell."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    base_url: str = "http://127.0.0.1:8765"
    notify: tuple[Endpoint, ...] = ()
    mail: tuple[MailEndpoint, ...] = ()
    """E-mail routes (``serve.mail``): a link to the call's page, never a value."""
    slack: tuple[SlackRoute, ...] = ()
    """Slack channels with Approve/Deny buttons (``serve.slack``)."""
    identity: IdentityConfig | None = None
    """Operators from an identity provider's signed assertion (``serve.identity``)."""
    checkpoint_every: float | None = Field(default=600.0, gt=0)
    """Seconds between the audit checkpoints the server takes (``checkpointer``);
    None: none (take them with ``agent-gate audit checkpoint`` instead)."""
    checkpoint_signing_key: str | None = None
    """A key file from ``agent-gate audit keygen`` (mode 0600): checkpoints are signed."""
    checkpoint_publish: tuple[str, ...] = ()
    """Witnesses for each signed checkpoint: files, directories, http(s) URLs."""
    sweep_every: float | None = Field(default=10.0, gt=0)
    """Seconds between passes over the approval deadlines that passed (``ledger.sweeper``:
    deny or escalate); None: none (run ``agent-gate approvals sweep`` instead)."""


def load_config(path: str) -> ServeConfig:
    """The file's configuration; every secret it names must be set in the environment."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        config = ServeConfig.model_validate(data)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise GateUsageError(f"{path}: not a serve configuration ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:200]})") from None
    for e in config.notify:
        bad = set(e.events) - set(outbox.EVENT_KINDS)
        if bad:
            raise GateUsageError(f"{path}: notify {e.name!r}: unknown events {sorted(bad)}; "
                                 f"expected some of {list(outbox.EVENT_KINDS)}")
        if not os.environ.get(e.secret_env):
            raise GateUsageError(f"{path}: notify {e.name!r}: ${e.secret_env} is not set")
    if config.checkpoint_publish and config.checkpoint_signing_key is None:
        raise GateUsageError(f"{path}: checkpoint_publish needs checkpoint_signing_key: "
                             "only a signed checkpoint means anything outside the ledger")
    for m in config.mail:
        bad = set(m.events) - set(outbox.EVENT_KINDS)
        if bad:
            raise GateUsageError(f"{path}: mail {m.name!r}: unknown events {sorted(bad)}; "
                                 f"expected some of {list(outbox.EVENT_KINDS)}")
        for env in (m.link_secret_env, m.username_env, m.password_env):
            if env is not None and not os.environ.get(env):
                raise GateUsageError(f"{path}: mail {m.name!r}: ${env} is not set")
    for r in config.slack:
        bad = set(r.events) - set(outbox.EVENT_KINDS)
        if bad:
            raise GateUsageError(f"{path}: slack {r.name!r}: unknown events {sorted(bad)}; "
                                 f"expected some of {list(outbox.EVENT_KINDS)}")
        for env in (r.token_env, r.signing_secret_env):
            if not os.environ.get(env):
                raise GateUsageError(f"{path}: slack {r.name!r}: ${env} is not set")
    return config


def check_route_roles(config: ServeConfig, policy: Policy | None) -> None:
    """Refuse a route whose ``roles:`` names a role no rule of ``policy`` escalates to
    (``Policy.escalation_roles``): it would never hear of an escalation, silently.
    ``UnknownRouteRole`` names the first such route (``slack[1] 'legal'``: its list,
    index and name) and its unknown roles, never its URL or a secret. Without a policy
    no role is known (the agents' gates may run one this server was not given): nothing
    is checked."""
    if policy is None:
        return
    known = policy.escalation_roles()
    lists: tuple[tuple[str, Sequence[Endpoint | MailEndpoint | SlackRoute]], ...] = (
        ("notify", config.notify), ("mail", config.mail), ("slack", config.slack))
    for kind, routes in lists:
        for index, route in enumerate(routes):
            unknown = [role for role in route.roles if role not in known]
            if unknown:
                raise UnknownRouteRole(f"{kind}[{index}] {route.name!r}", unknown, known)


def sign(secret: bytes, timestamp: int, body: bytes) -> str:
    """The signature header's value for ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def post_signed(http: httpx.Client, url: str, secret: bytes, body: bytes,
                headers: dict[str, str]) -> str | None:
    """One signed POST: None when a 2xx took it, else what went wrong (never the body)."""
    stamp = int(time.time())
    try:
        got = http.post(url, content=body, headers={
            **headers, "X-Agent-Gate-Timestamp": str(stamp),
            "X-Agent-Gate-Signature": sign(secret, stamp, body)})
    except httpx.HTTPError as error:
        return type(error).__name__
    return None if got.is_success else f"HTTP {got.status_code}"


def witness_name(url: str) -> str:
    """The cursor of the witness at ``url`` (a digest: a URL may be longer than a name)."""
    return "witness:" + hashlib.sha256(url.encode("utf-8")).hexdigest()[:40]


def deliver_checkpoints(engine: Any, url: str, secret: bytes, *, tries: int = 3,
                        backoff: float = 0.2, timeout: float = 10.0) -> int:
    """POST every signed checkpoint the witness at ``url`` has not acknowledged, oldest
    first, each up to ``tries`` times with exponential backoff; the cursor moves past
    one only after a 2xx. The number delivered; ``EvidenceError`` for one no try
    delivered (it stays in the outbox, first in line for the next call)."""
    name = witness_name(url)
    seq = outbox.witness_cursor(engine, name)
    sent = 0
    with httpx.Client(timeout=timeout) as http:
        while batch := outbox.signed_after(engine, seq):
            for checkpoint_id, note in batch:
                headers = {"Content-Type": "text/plain; charset=utf-8",
                           "X-Agent-Gate-Event": "checkpoint",
                           "X-Agent-Gate-Event-Id": str(checkpoint_id)}
                for attempt in range(tries):
                    failed = post_signed(http, url, secret, note.encode("utf-8"), headers)
                    if failed is None:
                        break
                    if attempt + 1 < tries:
                        time.sleep(backoff * 2 ** attempt)
                if failed is not None:
                    raise EvidenceError(
                        f"the witness did not take checkpoint {checkpoint_id} after {tries} "
                        f"tries ({failed}); it stays in the outbox for the next publish")
                outbox.advance(engine, name, checkpoint_id)
                seq = checkpoint_id
                sent += 1
    return sent


def hand_to_witnesses(engine: Any, sinks: Iterable[str], note: str | None, key: VerifierKey
                      ) -> tuple[list[str], list[str]]:
    """Hand the newest signed checkpoint to every sink: a file or directory gets ``note``
    (``evidence.witness.publish``; None: none new, files skipped), an http(s) URL every
    checkpoint after its cursor (``deliver_checkpoints``). ``(published, failures)``,
    one failure never keeping the others from theirs."""
    done: list[str] = []
    failed: list[str] = []
    for sink in sinks:
        try:
            if sink.startswith(("http://", "https://")):
                secret = os.environ.get(WITNESS_SECRET_ENV)
                if not secret:
                    raise EvidenceError(f"${WITNESS_SECRET_ENV} is not set: an HTTP witness "
                                        "needs the secret its POSTs are signed with")
                deliver_checkpoints(engine, sink, secret.encode())
                done.append(sink)
            elif note is not None:
                done.append(str(publish(note, key, Path(sink))))
        except (EvidenceError, OSError) as error:
            failed.append(f"{sink}: {error}")
    return done, failed


class Notifier:
    """One thread per endpoint: read the trail after its cursor, POST, then advance."""

    def __init__(self, url: str, config: ServeConfig, policy: Policy | None = None) -> None:
        self.url = url
        self.config = config
        self.policy = policy
        """Whose rules say who may answer a call (a Slack message says so); None: no
        policy file, no roles known."""
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(e,), daemon=True,
                                          name=f"agent-gate-webhook-{e.name}")
                         for e in config.notify] + [
            threading.Thread(target=self._mail, args=(m,), daemon=True,
                             name=f"agent-gate-mail-{m.name}") for m in config.mail] + [
            threading.Thread(target=self._slack, args=(r,), daemon=True,
                             name=f"agent-gate-slack-{r.name}") for r in config.slack] + [
            threading.Thread(target=self._slack_replies, args=(r,), daemon=True,
                             name=f"agent-gate-slack-reply-{r.name}") for r in config.slack]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)

    def _run(self, endpoint: Endpoint) -> None:
        secret = os.environ[endpoint.secret_env].encode()
        with httpx.Client(timeout=endpoint.timeout) as http:
            self._follow(endpoint.name, endpoint.events, endpoint.poll,
                         lambda notice: self._deliver(http, endpoint, secret, notice),
                         endpoint.roles)

    def _mail(self, endpoint: MailEndpoint) -> None:
        secret = os.environ[endpoint.link_secret_env].encode()

        def deliver(notice: outbox.Notice) -> bool:
            msg = message(endpoint, notice, self.config.base_url, secret)
            delay = endpoint.backoff
            while not self._stop.is_set():
                try:
                    send(endpoint, msg)
                    return True
                except (smtplib.SMTPException, OSError):
                    self._stop.wait(delay)
                    delay = min(delay * 2, endpoint.max_backoff)
            return False

        # Its own cursor name: a webhook and a mail route may share a name.
        self._follow(f"mail:{endpoint.name}", endpoint.events, endpoint.poll, deliver,
                     endpoint.roles)

    def _slack(self, route: SlackRoute) -> None:
        from slack_sdk.errors import SlackApiError

        def deliver(notice: outbox.Notice) -> bool:
            rec = None
            if notice.call_id is not None:
                with Ledger(self.url) as ledger:
                    rec = ledger.get(notice.task_id, notice.call_id)
            asked = asked_of(self.policy, rec.tool, rec.rule_ids) if rec else None
            delay = route.backoff
            while not self._stop.is_set():
                try:
                    post(route, notice, rec.row_id if rec else None,
                         rec.args_hash if rec else None, self.config.base_url, asked)
                    return True
                except (SlackApiError, OSError):
                    self._stop.wait(delay)
                    delay = min(delay * 2, route.max_backoff)
            return False

        self._follow(f"slack:{route.name}", route.events, route.poll, deliver, route.roles)

    def _slack_replies(self, route: SlackRoute) -> None:
        """Replace each answered Slack message (``slack_reply``), at least once."""
        def deliver(entry: AuditRecord) -> bool | None:
            reply = slack_reply.open_reply(route, entry, self.config.base_url)
            if reply is None:
                return None
            delay = route.backoff
            while not self._stop.is_set():
                if slack_reply.send(reply) is not slack_reply.ReplyOutcome.RETRY or \
                        datetime.now(UTC) >= reply.until:
                    return True
                self._stop.wait(delay)
                delay = min(delay * 2, route.max_backoff)
            return False

        # "reply:" and a route's name fit the cursor's 100 characters, as "slack:" does.
        self._follow_entries(f"reply:{route.name}", route.poll, deliver)

    def _follow(self, name: str, events: tuple[str, ...], poll: float,
                deliver: Callable[[outbox.Notice], bool], roles: tuple[str, ...] = ()
                ) -> None:
        """Read the trail after the cursor ``name``; deliver each notice the route wants
        (``outbox.wanted``: of ``events``, escalations to ``roles``; True once delivered,
        False: stopping) and only then move the cursor."""
        def each(entry: AuditRecord) -> bool | None:
            notice = outbox.notice_of(entry)
            if notice is None:
                return None
            return deliver(notice) if outbox.wanted(notice, events, roles) else True

        self._follow_entries(name, poll, each)

    def _follow_entries(self, name: str, poll: float,
                        deliver: Callable[[AuditRecord], bool | None]) -> None:
        """Read the trail after the cursor ``name``; hand each entry to ``deliver``
        (None: nothing for it, True: done, False: stopping) and move the cursor past
        each one done only then, past the rest in one move per page."""
        with Ledger(self.url) as ledger:
            engine = ledger.engine
            seq = outbox.cursor(engine, name)
            while not self._stop.is_set():
                page = outbox.entries_after(engine, seq)
                for entry in page:
                    done = deliver(entry)
                    if done is False:
                        return  # stopping: the cursor stays before this entry
                    if done:
                        outbox.advance(engine, name, entry.seq)
                if page:
                    seq = page[-1].seq
                    outbox.advance(engine, name, seq)
                    continue
                self._stop.wait(poll)

    def _deliver(self, http: httpx.Client, endpoint: Endpoint, secret: bytes,
                 notice: outbox.Notice) -> bool:
        """POST until a 2xx (True), backing off; False only when stopping."""
        body = json.dumps(self._event(notice), sort_keys=True).encode()
        headers = {"Content-Type": "application/json", "X-Agent-Gate-Event-Id": str(notice.seq)}
        delay = endpoint.backoff
        while not self._stop.is_set():
            if post_signed(http, endpoint.url, secret, body, headers) is None:
                return True
            self._stop.wait(delay)
            delay = min(delay * 2, endpoint.max_backoff)
        return False

    def _event(self, notice: outbox.Notice) -> dict[str, Any]:
        base = self.config.base_url.rstrip("/")
        event = notice.to_dict()
        if notice.call_id is not None:
            # Names in the query, every reserved character encoded: never a path segment
            # (a call id of "../x" would otherwise point the link at another page).
            query = f"task={quote(notice.task_id, safe='')}&call={quote(notice.call_id, safe='')}"
            event["links"] = {"inbox": f"{base}/inbox/call?{query}",
                              "api": f"{base}/api/calls?{query}"}
        return event
