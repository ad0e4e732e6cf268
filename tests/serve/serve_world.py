"""A real ledger with calls that wait, operators, and ``agent-gate serve`` on loopback.

The server is the real application under uvicorn, on a socket bound to 127.0.0.1
port 0, in a thread of the test process; the agent side is a ``Gate`` of its own on
the same SQLite file (as an agent process would be), whose tools count their runs.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import uvicorn
from waiting import wait_until

from agent_gate import Gate, OutcomeUnknown, Principal, ToolRegistry
from agent_gate.ledger import Ledger
from agent_gate.ledger.views.operators import Operators
from agent_gate.serve import create_app
from agent_gate.serve.auth import LoginLimiter
from agent_gate.serve.webhooks import ServeConfig

POLICY = """
version: 1
tools:
  send_email:
    effect: write
    idempotency: none
    rules:
      - id: mail-needs-a-person
        effect: approve
        reason: Every mail is read by a person first.
        approval: {editable: [subject, body]}
  refund:
    effect: write
    idempotency: none
    rules:
      - id: refunds-need-a-person
        effect: approve
        reason: Refunds are approved by finance.
  charge_card:
    effect: write
    idempotency: none
    rules:
      - {id: charges, effect: allow}
"""
MAIL_RULE = "        approval: {editable: [subject, body]}\n"
"""The mail rule's approval line: tests that vary the mail's approval replace it."""
REFUND_REASON = "        reason: Refunds are approved by finance.\n"
"""The refund rule's last line: tests that give refunds an approval block add after it."""
assert MAIL_RULE in POLICY and REFUND_REASON in POLICY
ESCALATING = ("version: 1\noperators:\n  carol: {roles: [finance]}\n"
              + POLICY.removeprefix("\nversion: 1\n").replace(
                  REFUND_REASON,
                  REFUND_REASON + "        approval: {timeout: 1s, then: {escalate: finance}}\n"))
"""POLICY where a refund nobody answered within 1 s is escalated to finance (carol)."""
CHARGES_RULE = "      - {id: charges, effect: allow}\n"
assert CHARGES_RULE in ESCALATING
TWO_DESKS = ESCALATING.replace("  carol: {roles: [finance]}\n",
                               "  carol: {roles: [finance]}\n  erin: {roles: [legal]}\n").replace(
    CHARGES_RULE, "      - id: charges\n        effect: approve\n"
                  "        reason: A charge is approved by a person.\n"
                  "        approval: {timeout: 1h, then: {escalate: legal}}\n")
"""ESCALATING with a second desk: a charge nobody answered within an hour is escalated
to legal (erin). A route's ``roles:`` must name a role the policy escalates to or asks
approval from (``serve.webhooks.check_route_roles``): the tests that show a route of
one role reading past another's escalation use this one."""



@dataclass
class World:
    """The ledger, the agent's tools and what they did, and the operators' tokens."""

    url: str
    policy: Path
    runs: list[str] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)

    def tools(self) -> ToolRegistry:
        tools = ToolRegistry()
        runs = self.runs

        @tools.tool(effect="write", idempotency="none")
        def send_email(to: str, subject: str, body: str) -> dict[str, Any]:
            runs.append(f"send_email {to}")
            return {"queued": True}

        @tools.tool(effect="write", idempotency="none")
        def refund(order: str, cents: int) -> dict[str, Any]:
            runs.append(f"refund {order}")
            return {"refunded": cents}

        @tools.tool(effect="write", idempotency="none")
        def charge_card(order: str) -> dict[str, Any]:
            runs.append(f"charge_card {order}")
            raise OutcomeUnknown("the card processor timed out")

        return tools

    def gate(self) -> Gate:
        return Gate(self.tools(), self.url, policy=str(self.policy))

    def call(self, task: str, call_id: str, name: str, arguments: dict[str, Any],
             principal: str = "alice") -> str:
        """Hand one call to the agent's gate; returns the state it is left in."""
        with self.gate() as gate:
            out = gate.execute(task, {"call_id": call_id, "name": name,
                                      "arguments": arguments},
                               principal=Principal(id=principal))
        return out.state.value

    def shown(self, task: str, call_id: str) -> tuple[int, str]:
        """The call's ``ref`` and its arguments' hash, as the API and the inbox show them."""
        with Ledger(self.url) as ledger:
            rec = ledger.get(task, call_id)
        assert rec is not None, (task, call_id)
        return rec.row_id, rec.args_hash

    def answer(self, task: str, call_id: str, **body: Any) -> tuple[str, dict[str, Any]]:
        """The API path of the call's answers (``.../approve`` appended by the caller)
        and a body carrying the hash of its arguments."""
        ref, args_hash = self.shown(task, call_id)
        return f"/api/calls/{ref}", {"args_hash": args_hash, **body}

    def audit(self) -> list[Any]:
        with Ledger(self.url) as ledger:
            return ledger.audit()


@contextmanager
def logged_in(server: Running, world: World, name: str) -> Iterator[tuple[httpx.Client, str]]:
    """A client holding ``name``'s session, and the CSRF token of its forms."""
    with httpx.Client(base_url=server.base, headers={"Origin": server.base}) as http:
        got = http.post("/login", data={"token": world.tokens[name]})
        assert got.status_code == 303 and got.headers["location"] == "/inbox"
        page = http.get("/inbox")
        match = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert match, page.text
        yield http, match.group(1)


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> World:
    """On each ledger backend (``db_url``: SQLite, and PostgreSQL when configured)."""
    return build_world(db_url, tmp_path, POLICY, {
        "bob": {"approve": ["send_email"]},
        "carol": {"approve": ["refund"], "resolve": ["*"]},
        "alice": {"approve": ["*"]},
    }, body="Dear Ana")


def build_world(url: str, tmp_path: Path, policy_text: str,
                operators: dict[str, dict[str, list[str]]], *,
                subject: str = "Refund", body: str) -> World:
    """A world under ``policy_text`` with ``operators`` (name -> their rights) and one mail
    waiting for a person: the starting point every inbox test shares."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(policy_text)
    w = World(url, policy)
    with Ledger(url) as ledger:
        ops = Operators(ledger.engine)
        for name, rights in operators.items():
            w.tokens[name] = ops.add(name, **rights)[1]
    assert w.call("t1", "mail-1", "send_email",
                  {"to": "ana@elsewhere.org", "subject": subject, "body": body}) \
        == "awaiting_approval"
    return w


@dataclass(frozen=True)
class Running:
    base: str
    limiter: LoginLimiter


@contextmanager
def serving(world: World, config: ServeConfig | None = None, *,
            policy: bool = True, tools: bool = False) -> Iterator[Running]:
    """``create_app`` under uvicorn on a loopback port of its own, until the block ends
    (judging approvals under the world's policy, or with none; ``tools``: with the
    world's tool schemas, which approvers' edits are checked against)."""
    limiter = LoginLimiter()
    app = create_app(world.url, str(world.policy) if policy else None, limiter=limiter,
                     config=config, tools=world.tools() if tools else None)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: srv.started, what="uvicorn to start")
    try:
        yield Running(f"http://127.0.0.1:{port}", limiter)
    finally:
        srv.should_exit = True
        thread.join(timeout=30)
        sock.close()


@pytest.fixture
def server(world: World) -> Iterator[Running]:
    with serving(world) as running:
        yield running


def raw_post(server: Running, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """Send a request head (and ``body``) as written, on a socket of its own, for what no
    client sends (a length announced and not kept, a body past every bound); the
    server's status and answer, read until it closes the connection. No answer within
    the socket's timeout is an error: the server would still be waiting for the body."""
    url = urlsplit(server.base)
    with socket.create_connection((url.hostname, url.port), timeout=20) as sock:
        sock.sendall(head.encode("latin-1") + body)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
    status = re.match(rb"HTTP/1\.1 (\d{3}) ", got)
    assert status is not None, got[:200]
    return int(status.group(1)), got


def call_ids(html: str) -> list[str]:
    """The call ids an inbox list page (or its rows) shows, in order."""
    return re.findall(r'<td class="mono call-id">([^<]*)</td>', html)


def picked(html: str) -> set[int]:
    """The refs of the rows a list page offers a tick box (an answer) for."""
    return {int(v.split(":")[0]) for v in re.findall(r'name="pick" value="([^"]+)"', html)}


def listed_total(html: str) -> int:
    """The count a list page says it holds (``#total``)."""
    found = re.search(r'<b id="total">(\d+)</b>', html)
    assert found is not None, html
    return int(found.group(1))
