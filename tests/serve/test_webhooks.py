"""Webhooks from ``agent-gate serve``: signed events, retried, never lost.

A real receiver on loopback records every POST; the events are checked as a
receiver would: the HMAC-SHA256 over ``timestamp.body`` under the shared secret,
the event's ids and links, and no argument value anywhere in the body.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_world import ESCALATING, TWO_DESKS, World, build_world, serving
from sqlalchemy import text
from waiting import wait_until

from agent_gate.ledger import Ledger
from agent_gate.serve.mail import MailEndpoint
from agent_gate.serve.webhooks import Endpoint, ServeConfig

SECRET = "s3cret-for-tests"


@dataclass
class Receiver:
    url: str
    failures_left: int = 0
    got: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    attempts: int = 0

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.got]


@contextmanager
def receiver(failures: int = 0) -> Iterator[Receiver]:
    """An HTTP receiver that answers 500 to its first ``failures`` POSTs, then 204."""
    state = Receiver("", failures)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                state.attempts += 1
                failing = state.failures_left > 0
                if failing:
                    state.failures_left -= 1
                else:
                    state.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(500 if failing else 204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{http.server_address[1]}/hook"
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        http.shutdown()
        http.server_close()


@pytest.fixture(autouse=True)
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AG_TEST_HOOK_SECRET", SECRET)


def config(url: str) -> ServeConfig:
    return ServeConfig(base_url="https://gate.example", notify=(Endpoint(
        name="ops", url=url, secret_env="AG_TEST_HOOK_SECRET", backoff=0.01, poll=0.05),))


def cursor(world: World, name: str = "ops") -> int | None:
    with Ledger(world.url) as ledger, ledger.engine.connect() as conn:
        return conn.execute(text("SELECT seq FROM webhook_cursors WHERE name = :n"),
                            {"n": name}).scalar()


def verified(headers: dict[str, str], body: bytes) -> bool:
    stamp = headers["x-agent-gate-timestamp"]
    want = hmac.new(SECRET.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["x-agent-gate-signature"], "sha256=" + want)


def test_waiting_in_doubt_and_resolved_are_posted_signed_without_arguments(
        world: World) -> None:
    with receiver() as hook, serving(world, config(hook.url)) as server:
        wait_until(lambda: cursor(world) is not None, what="the webhook cursor")
        world.call("t2", "mail-2", "send_email",
                   {"to": "bo@elsewhere.org", "subject": "Secret plan", "body": "pssst"})
        bob = {"Authorization": f"Bearer {world.tokens['bob']}"}
        path, body = world.answer("t2", "mail-2")
        assert httpx.post(f"{server.base}{path}/deny", headers=bob,
                          json={**body, "reason": "no"}).status_code == 200
        world.call("t3", "charge-1", "charge_card", {"order": "o-7"})
        wait_until(lambda: len(hook.got) >= 3, what="three events")
    events = hook.events()
    assert [(e["type"], e["call_id"], e["tool"]) for e in events] == [
        ("call.awaiting_approval", "mail-2", "send_email"),
        ("call.resolved", "mail-2", "send_email"),
        ("call.in_doubt", "charge-1", "charge_card")]
    assert events[0]["rule_ids"] == ["mail-needs-a-person"]
    assert events[1]["state"] == "rejected" and events[1]["actor"] == "operator:bob"
    assert events[0]["links"] == {"inbox": "https://gate.example/inbox/call?task=t2&call=mail-2",
                                  "api": "https://gate.example/api/calls?task=t2&call=mail-2"}
    assert all(verified(h, b) for h, b in hook.got)
    assert not verified({**hook.got[0][0], "x-agent-gate-timestamp": "1"}, hook.got[0][1])
    for value in (b"bo@elsewhere.org", b"Secret plan", b"pssst", b"o-7"):
        assert all(value not in body for _, body in hook.got)
    assert "mail-1" not in str(events)  # it waited before the endpoint existed


def test_a_failing_receiver_gets_the_event_again_until_it_acknowledges(
        world: World) -> None:
    with receiver(failures=3) as hook, serving(world, config(hook.url)):
        wait_until(lambda: cursor(world) is not None, what="the webhook cursor")
        start = cursor(world)
        world.call("t2", "mail-2", "send_email", {"to": "x@y.org", "subject": "s", "body": "b"})
        wait_until(lambda: hook.got, what="the event, after three failures")
        wait_until(lambda: (cursor(world) or 0) > (start or 0), what="the cursor to move")
    assert hook.attempts == 4
    assert [e["call_id"] for e in hook.events()] == ["mail-2"]


@pytest.mark.slow  # a server process killed and started again
def test_a_crash_before_delivery_loses_nothing(world: World, tmp_path: Path) -> None:
    conf = tmp_path / "serve.yaml"

    def start(url: str) -> subprocess.Popen[str]:
        conf.write_text(f"base_url: http://gate\nnotify:\n  - name: ops\n    url: {url}\n"
                        "    secret_env: AG_TEST_HOOK_SECRET\n    backoff: 0.01\n"
                        "    poll: 0.05\n")
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent_gate", "serve", "--db", world.url, "--config",
             str(conf), "--listen", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True,
            env=os.environ.copy())
        assert proc.stderr is not None
        assert re.search(r"http://127\.0\.0\.1:\d+/inbox", proc.stderr.readline())
        return proc

    with receiver(failures=10**6) as down:
        proc = start(down.url)
        try:
            wait_until(lambda: cursor(world) is not None, what="the webhook cursor")
            world.call("t2", "mail-2", "send_email",
                       {"to": "x@y.org", "subject": "s", "body": "b"})
            wait_until(lambda: down.attempts >= 2, what="failed deliveries")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    with receiver() as up:
        proc = start(up.url)
        try:
            wait_until(lambda: up.got, what="the event, after the restart")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert [(e["type"], e["call_id"]) for e in up.events()] == [
        ("call.awaiting_approval", "mail-2")]


def test_an_escalation_is_posted_to_the_routes_of_its_role_only(
        db_url: str, tmp_path: Path) -> None:
    """The refund's approval deadline passes (1 s, the server's own sweeper): only
    finance may answer it now, and the route for finance hears so; the route for legal
    reads past it."""
    world = build_world(db_url, tmp_path, TWO_DESKS, {"carol": {"approve": ["refund"]}},
                        body="Dear Ana")

    def route(name: str, url: str) -> Endpoint:
        return Endpoint(name=name, url=url, secret_env="AG_TEST_HOOK_SECRET", backoff=0.01,
                        poll=0.05, events=("escalated",), roles=(name,))

    with receiver() as finance, receiver() as legal:
        config = ServeConfig(base_url="https://gate.example", checkpoint_every=None,
                             sweep_every=0.2, notify=(route("finance", finance.url),
                                                      route("legal", legal.url)))
        with serving(world, config):
            wait_until(lambda: None not in (cursor(world, "finance"), cursor(world, "legal")),
                       what="both routes' cursors")
            assert world.call("shop", "r-1", "refund", {"order": "o-1", "cents": 500}) \
                == "awaiting_approval"
            wait_until(lambda: len(finance.got) >= 1, what="the escalation")
            seq = finance.events()[0]["id"]
            wait_until(lambda: (cursor(world, "legal") or 0) >= seq,
                       what="the legal route to read past the escalation")
    (event,) = finance.events()
    assert (event["type"], event["call_id"], event["tool"], event["state"], event["role"]) \
        == ("call.escalated", "r-1", "refund", "awaiting_approval", "finance")
    assert event["rule_ids"] == ["refunds-need-a-person"]
    assert event["links"]["inbox"] == "https://gate.example/inbox/call?task=shop&call=r-1"
    assert verified(*finance.got[0]) and legal.got == []
    assert all(value not in finance.got[0][1] for value in (b"o-1", b"500"))


def test_a_route_for_a_role_the_policy_never_names_is_refused_at_start(
        world: World, tmp_path: Path) -> None:
    """A route's ``roles:`` narrows its escalations to those roles; one the policy never
    escalates to (a typo: "finanse") would hear none, silently.
    ``create_app`` refuses it, naming the route and the role and listing the policy's
    roles, never the route's URL or secret; without a policy no role is known, so
    nothing is checked."""
    from agent_gate.errors import GateUsageError, UnknownRouteRole
    from agent_gate.serve import create_app

    world.policy.write_text(ESCALATING)  # escalates a refund to finance
    hook = "https://hooks.example/h/T0-path-secret"
    ok = Endpoint(name="finance", url=hook, secret_env="AG_TEST_HOOK_SECRET",
                  events=("escalated",), roles=("finance",))
    typo = ok.model_copy(update={"name": "desk", "roles": ("finance", "finanse")})
    with pytest.raises(UnknownRouteRole) as refused:
        create_app(world.url, str(world.policy),
                   config=ServeConfig(checkpoint_every=None, sweep_every=None,
                                      notify=(ok, typo)))
    error = refused.value
    assert isinstance(error, GateUsageError)
    assert (error.route, error.roles, error.known) == ("notify[1] 'desk'", ("finanse",),
                                                       ("finance",))
    assert str(error).startswith("notify[1] 'desk': roles: names 'finanse', which no rule")
    assert "the policy's roles: 'finance'" in str(error)
    assert hook not in str(error) and SECRET not in str(error)
    # The route that names finance alone starts; so does the typo without a policy.
    for policy, routes in ((str(world.policy), (ok,)), (None, (ok, typo))):
        app = create_app(world.url, policy, config=ServeConfig(
            checkpoint_every=None, sweep_every=None, notify=routes))
        app.state.service.close()

    # Only the roles a rule escalates to are known: an approver or quorum role no rule
    # escalates to is never named by an escalated notice, so a route for it is as deaf
    # as a typo; a mail route is checked as a webhook is.
    world.policy.write_text(
        "version: 1\noperators: {carol: {roles: [finance]}}\napprovers: {roles: [support]}\n"
        "rules:\n  - {id: late, effect: approve, tools: [refund], reason: r, "
        "approval: {timeout: 1h, then: {escalate: finance}}}\n"
        "tools:\n  refund:\n    approvers: {roles: [billing]}\n    rules:\n"
        "      - {id: two, effect: approve, reason: r, "
        "approval: {approvers: {min: 2, roles: [audit]}}}\n  send_email: {}\n")
    desk = MailEndpoint(name="desk", host="smtp.example", sender="a@example.org",
                        to=("b@example.org",), link_secret_env="AG_TEST_HOOK_SECRET",
                        roles=("finance", "audit", "billing", "support", "legal"))
    with pytest.raises(UnknownRouteRole) as refused:
        create_app(world.url, str(world.policy), config=ServeConfig(
            checkpoint_every=None, sweep_every=None, mail=(desk,)))
    assert (refused.value.route, refused.value.roles, refused.value.known) == (
        "mail[0] 'desk'", ("audit", "billing", "support", "legal"), ("finance",))
