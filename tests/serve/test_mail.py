"""E-mail from ``agent-gate serve``: a real SMTP server on loopback (``aiosmtpd``)
receives the notice; it names the call and links to its page, signed, and carries no
argument value; a refused delivery is retried until the server takes it."""

from __future__ import annotations

import email
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from serve_world import ESCALATING, World, build_world, logged_in, serving
from sqlalchemy import text
from waiting import wait_until

from agent_gate.ledger import Ledger
from agent_gate.serve.mail import MailEndpoint
from agent_gate.serve.webhooks import ServeConfig

aiosmtpd = pytest.importorskip("aiosmtpd.controller")

LINK_SECRET = "link-secret-for-tests"


@dataclass
class Mailbox:
    refuse_first: int = 0
    attempts: int = 0
    got: list[Message] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.lock:
            self.attempts += 1
            if self.attempts <= self.refuse_first:
                return "451 4.3.0 try again later"
            self.got.append(email.message_from_bytes(envelope.content))
        return "250 OK"


@contextmanager
def smtp_server(refuse_first: int = 0) -> Iterator[tuple[Mailbox, int]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    box = Mailbox(refuse_first)
    controller = aiosmtpd.Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield box, port
    finally:
        controller.stop()


def cursor(world: World, name: str = "approvers") -> int | None:
    """The mail route's cursor (a new route starts at the trail's head when it first
    reads it: calls recorded before that are not its news)."""
    with Ledger(world.url) as ledger, ledger.engine.connect() as conn:
        return conn.execute(text("SELECT seq FROM webhook_cursors WHERE name = :n"),
                            {"n": f"mail:{name}"}).scalar()


def config(port: int) -> ServeConfig:
    return ServeConfig(checkpoint_every=None, mail=(MailEndpoint(
        name="approvers", host="127.0.0.1", port=port, starttls=False,
        sender="agent-gate@example.org", to=("oncall@example.org",),
        link_secret_env="AGENT_GATE_LINK_SECRET", backoff=0.05, poll=0.05),))


@pytest.fixture(autouse=True)
def _link_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_GATE_LINK_SECRET", LINK_SECRET)


def test_a_waiting_call_is_mailed_with_a_signed_link_and_no_value(world: World) -> None:
    with smtp_server() as (box, port), serving(world, config(port)) as server:
        wait_until(lambda: cursor(world) is not None, what="the mail route's cursor")
        assert world.call("t7", "mail-7", "send_email", {
            "to": "secret.person@elsewhere.org", "subject": "Payroll", "body": "Salary 9999"},
            principal="zoe") == "awaiting_approval"
        wait_until(lambda: len(box.got) >= 1, what="the mail")
        (msg,) = box.got
        text = msg.get_payload(decode=True).decode()  # type: ignore[union-attr]
        link = re.search(r"Open it: (\S+)", text)
        assert link is not None
        path = link.group(1).replace("http://127.0.0.1:8765", "")
        with logged_in(server, world, "bob") as (http, _):
            opened = http.get(path)
            forged = http.get(path.replace("call=mail-7", "call=mail-1"))
            unsigned = http.get(path.split("&sig=")[0])
    assert msg["Subject"] == "[agent-gate] send_email waits for your approval"
    assert msg["To"] == "oncall@example.org" and msg["From"] == "agent-gate@example.org"
    assert "Call:  mail-7" in text and "Task:  t7" in text and "mail-needs-a-person" in text
    whole = msg.as_string()
    for value in ("secret.person", "Payroll", "Salary", "9999"):
        assert value not in whole
    ref, _ = world.shown("t7", "mail-7")
    assert opened.status_code == 303 and opened.headers["location"] == f"/inbox/calls/{ref}"
    assert forged.status_code == 400 and "not signed by this server" in forged.text
    assert unsigned.status_code == 303  # a webhook's link (no sig) still leads there
    assert box.attempts == 1


def test_a_refused_mail_is_retried_until_the_server_takes_it(world: World) -> None:
    with smtp_server(refuse_first=2) as (box, port), serving(world, config(port)):
        wait_until(lambda: cursor(world) is not None, what="the mail route's cursor")
        start = cursor(world)
        assert world.call("t8", "mail-8", "send_email", {
            "to": "a@b.org", "subject": "s", "body": "b"}, principal="zoe") \
            == "awaiting_approval"
        wait_until(lambda: len(box.got) >= 1, what="the mail after two refusals")
        wait_until(lambda: (cursor(world) or 0) > (start or 0), what="the cursor to move")
    assert box.attempts == 3 and len(box.got) == 1
    assert "mail-8" in box.got[0].as_string()


def test_a_mail_route_without_its_secret_is_refused_at_start(
        world: World, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_gate.errors import GateUsageError
    from agent_gate.serve.webhooks import load_config

    monkeypatch.delenv("AGENT_GATE_LINK_SECRET")
    path = tmp_path / "serve.yaml"
    path.write_text("mail:\n  - {name: a, host: 127.0.0.1, sender: x@y.org, to: [z@y.org], "
                    "link_secret_env: AGENT_GATE_LINK_SECRET}\n")
    with pytest.raises(GateUsageError, match=r"\$AGENT_GATE_LINK_SECRET is not set"):
        load_config(str(path))


def test_an_escalation_is_mailed_to_the_route_of_its_role(db_url: str, tmp_path: Path) -> None:
    world = build_world(db_url, tmp_path, ESCALATING, {"carol": {"approve": ["refund"]}},
                        body="Dear Ana")
    with smtp_server() as (box, port):
        finance = MailEndpoint(
            name="finance", host="127.0.0.1", port=port, starttls=False,
            sender="agent-gate@example.org", to=("finance@example.org",),
            link_secret_env="AGENT_GATE_LINK_SECRET", backoff=0.05, poll=0.05,
            events=("escalated",), roles=("finance",))
        with serving(world, ServeConfig(checkpoint_every=None, sweep_every=0.2,
                                        mail=(finance,))):
            wait_until(lambda: cursor(world, "finance") is not None, what="the cursor")
            assert world.call("shop", "r-1", "refund", {"order": "o-1", "cents": 500}) \
                == "awaiting_approval"
            wait_until(lambda: len(box.got) >= 1, what="the escalation's mail")
    (msg,) = box.got
    text_ = msg.get_payload(decode=True).decode()  # type: ignore[union-attr]
    assert msg["Subject"] == "[agent-gate] refund was escalated to finance"
    assert msg["To"] == "finance@example.org"
    assert "Role:  finance (only its holders may answer the call now)" in text_
    assert "Call:  r-1" in text_ and "refunds-need-a-person" in text_
    assert "o-1" not in msg.as_string() and "500" not in text_
