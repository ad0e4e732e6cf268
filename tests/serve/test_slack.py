"""Slack from ``agent-gate serve``: a Block Kit message with Approve and Deny buttons,
posted with ``slack-sdk`` to a loopback server that checks Slack's documented request
formats (``chat.postMessage``: bearer token, JSON body, block and element limits), and
clicks sent back the way Slack sends them (``block_actions``, form-encoded ``payload``,
signed ``v0`` with the app's signing secret)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from serve_world import Running, World, serving
from sqlalchemy import text
from waiting import wait_until

from agent_gate.ledger import Ledger
from agent_gate.serve.slack import SlackRoute
from agent_gate.serve.webhooks import ServeConfig

pytest.importorskip("slack_sdk")

TOKEN = "xoxb-test-token"
SIGNING_SECRET = "slack-signing-secret-for-tests"
BUTTON_STYLES = {"primary", "danger"}


@dataclass
class SlackApi:
    url: str = ""
    base: str = ""
    posts: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    replies: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """What reached a ``response_url`` (its path, the body), once accepted."""
    reply_attempts: int = 0
    failing_replies: int = 0
    """How many more POSTs to a response_url answer 500 (Slack having a bad minute)."""


def check_reply(body: dict[str, Any]) -> list[str]:
    """What Slack's documentation says a message to a response_url must hold: one that
    replaces the original ``replace_original: true``; an ephemeral one (seen by the
    clicker alone) ``response_type: ephemeral`` and the original left; both the
    fallback text and valid blocks."""
    if body.get("response_type") == "ephemeral":
        out = [] if body.get("replace_original") is False else ["replace_original: false"]
    else:
        out = [] if body.get("replace_original") is True else ["replace_original: true"]
    return out + check_message({**body, "channel": "(the response_url's own)"})


def check_message(body: dict[str, Any]) -> list[str]:
    """What Slack's documentation says a chat.postMessage with blocks must hold."""
    out = []
    if not isinstance(body.get("channel"), str) or not body["channel"]:
        out.append("channel")
    if not isinstance(body.get("text"), str) or len(body["text"]) > 40_000:
        out.append("text (the notification fallback)")
    blocks = body.get("blocks")
    if not isinstance(blocks, list) or not 1 <= len(blocks) <= 50:
        return [*out, "blocks: 1 to 50"]
    for b in blocks:
        if b.get("type") == "section":
            t = b.get("text", {})
            if t.get("type") not in ("mrkdwn", "plain_text") or \
                    not 1 <= len(t.get("text", "")) <= 3000:
                out.append("section text: mrkdwn or plain_text, 1-3000 characters")
        elif b.get("type") == "actions":
            els = b.get("elements", [])
            if not 1 <= len(els) <= 25 or len(b.get("block_id", "")) > 255:
                out.append("actions: 1-25 elements, block_id up to 255")
            for e in els:
                txt = e.get("text", {})
                if e.get("type") != "button" or txt.get("type") != "plain_text" \
                        or not 1 <= len(txt.get("text", "")) <= 75:
                    out.append("button text: plain_text, 1-75 characters")
                if not 1 <= len(e.get("action_id", "")) <= 255:
                    out.append("button action_id: 1-255")
                if len(e.get("value", "")) > 2000 or len(e.get("url", "")) > 3000:
                    out.append("button value up to 2000, url up to 3000")
                if "style" in e and e["style"] not in BUTTON_STYLES:
                    out.append("button style: primary or danger")
        else:
            out.append(f"unexpected block type {b.get('type')!r}")
    return out


@contextmanager
def slack_api() -> Iterator[SlackApi]:
    state = SlackApi()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path.startswith("/actions/"):
                self._reply(raw)
                return
            problems = []
            if self.path != "/api/chat.postMessage":
                problems.append(f"method {self.path}")
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                problems.append("Authorization: Bearer xoxb-...")
            if not self.headers.get("Content-Type", "").startswith("application/json"):
                problems.append("Content-Type: application/json")
            body = json.loads(raw)
            problems += check_message(body)
            state.problems += problems
            if not problems:
                state.posts.append(body)
            answer = json.dumps({"ok": not problems, "channel": body.get("channel"),
                                 "ts": f"{time.time():.6f}",
                                 **({"error": "invalid_blocks"} if problems else {})}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def _reply(self, raw: bytes) -> None:
            """A response_url: no token, a JSON body, "ok" in plain text."""
            state.reply_attempts += 1
            problems = [] if self.headers.get("Content-Type", "").startswith(
                "application/json") else ["Content-Type: application/json"]
            if "Authorization" in self.headers:
                problems.append("no Authorization on a response_url")
            body = json.loads(raw)
            problems += check_reply(body)
            state.problems += problems
            failing = state.failing_replies > 0
            state.failing_replies -= int(failing)
            status = 500 if failing else 400 if problems else 200
            if status == 200:
                state.replies.append((self.path, body))
            answer = b"ok" if status == 200 else b"invalid_blocks" if problems else b"oops"
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.base = f"http://127.0.0.1:{server.server_address[1]}/"
    state.url = state.base + "api/"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def click(server: Running, value: str, user: str = "U0ALICE",
          secret: str = SIGNING_SECRET, age: int = 0,
          response_url: str = "https://hooks.slack.com/actions/x") -> httpx.Response:
    """A button click as Slack sends it to the interactivity request URL."""
    payload = {"type": "block_actions", "user": {"id": user, "username": "someone"},
               "team": {"id": "T1"}, "channel": {"id": "C1"},
               "actions": [{"type": "button", "action_id": value.split(":")[0],
                            "block_id": "b", "value": value, "action_ts": "1"}],
               "response_url": response_url, "trigger_id": "t"}
    body = urlencode({"payload": json.dumps(payload)}).encode()
    ts = str(int(time.time()) - age)
    sig = "v0=" + hmac.new(secret.encode(), f"v0:{ts}:".encode() + body,
                           hashlib.sha256).hexdigest()
    return httpx.post(f"{server.base}/slack/interactions/approvals", content=body, headers={
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sig})


@pytest.fixture(autouse=True)
def _secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_GATE_SLACK_TOKEN", TOKEN)
    monkeypatch.setenv("AGENT_GATE_SLACK_SIGNING_SECRET", SIGNING_SECRET)


def test_a_waiting_call_is_posted_and_a_signed_click_approves_it(world: World) -> None:
    with slack_api() as api:
        route = SlackRoute(name="approvals", channel="C0APPROVALS",
                           token_env="AGENT_GATE_SLACK_TOKEN",
                           signing_secret_env="AGENT_GATE_SLACK_SIGNING_SECRET",
                           users={"U0ALICE": "alice", "U0BOB": "bob"},
                           api_url=api.url, backoff=0.05, poll=0.05,
                           # Slack's own hooks.slack.com URL is then not kept: no reply
                           # leaves the machine.
                           response_url_prefix=api.base)
        with serving(world, ServeConfig(checkpoint_every=None, slack=(route,))) as server:
            def cursor() -> Any:
                with Ledger(world.url) as ledger, ledger.engine.connect() as conn:
                    return conn.execute(text("SELECT seq FROM webhook_cursors "
                                             "WHERE name = 'slack:approvals'")).scalar()

            wait_until(lambda: cursor() is not None, what="the Slack route's cursor")
            assert world.call("t6", "refund-6", "refund", {"order": "o-66", "cents": 123456},
                              principal="zoe") == "awaiting_approval"
            wait_until(lambda: api.posts, what="the Slack message")
            (message,) = api.posts
            buttons = {e["action_id"]: e for b in message["blocks"] if b["type"] == "actions"
                       for e in b["elements"]}
            approve = buttons["approve"]["value"]
            forged = click(server, approve, secret="not-the-secret")
            stale = click(server, approve, age=600)
            stranger = click(server, approve, user="U0NOBODY")
            no_rights = click(server, approve, user="U0BOB")  # bob approves mail only
            swapped = click(server, approve.replace(approve[-64:], "e" * 64))
            ok = click(server, approve)
    assert api.problems == []
    assert message["channel"] == "C0APPROVALS" and "refund" in message["text"]
    whole = json.dumps(message)
    assert "o-66" not in whole and "123456" not in whole  # never an argument value
    ref, args_hash = world.shown("t6", "refund-6")
    assert approve == f"approve:{ref}:{args_hash}"
    assert buttons["open"]["url"].endswith("/inbox/call?task=t6&call=refund-6")
    assert (forged.status_code, stale.status_code) == (401, 401)
    assert "not an agent-gate operator" in stranger.json()["text"]
    assert "Refused (403)" in no_rights.json()["text"]
    assert "Refused (412)" in swapped.json()["text"]
    assert ok.status_code == 200 and ok.json()["text"] == "Approved by alice: refund-6"
    with Ledger(world.url) as ledger:
        details = ledger.call_details("t6", "refund-6")
    assert details is not None
    assert [(a.decided_by, a.reason) for a in details.approvals] == [
        ("alice", "from Slack (user U0ALICE)")]
    refused = [e for e in world.audit() if e.event == "operator_slack_answer"]
    assert [e.actor for e in refused] == ["slack", "slack", "slack:U0NOBODY"]
    assert [e for e in world.audit() if e.event == "operator_slack_reply"] == []
    assert api.reply_attempts == 0  # the URL was not under the route's prefix


def _route(api: SlackApi) -> SlackRoute:
    return SlackRoute(name="approvals", channel="C0APPROVALS",
                      token_env="AGENT_GATE_SLACK_TOKEN",
                      signing_secret_env="AGENT_GATE_SLACK_SIGNING_SECRET",
                      users={"U0ALICE": "alice", "U0BOB": "bob"}, api_url=api.url,
                      backoff=0.05, max_backoff=0.2, poll=0.05, response_url_prefix=api.base)


def _posted_buttons(world: World, api: SlackApi, task: str, call: str, tool: str,
                    args: dict[str, Any]) -> dict[str, str]:
    """Wait for the route's cursor, have a call wait, and read its message's buttons."""
    def cursor() -> Any:
        with Ledger(world.url) as ledger, ledger.engine.connect() as conn:
            return conn.execute(text("SELECT seq FROM webhook_cursors "
                                     "WHERE name = 'slack:approvals'")).scalar()

    wait_until(lambda: cursor() is not None, what="the Slack route's cursor")
    before = len(api.posts)
    assert world.call(task, call, tool, args, principal="zoe") == "awaiting_approval"
    wait_until(lambda: len(api.posts) > before, what="the Slack message")
    return {e["action_id"]: e.get("value", "") for b in api.posts[-1]["blocks"]
            if b["type"] == "actions" for e in b["elements"]}


def test_an_answer_from_slack_replaces_the_message_through_the_outbox(world: World) -> None:
    """The click's response_url gets the replacement (who answered, how; the buttons
    gone), after two failed tries, in Slack's documented format; the trail keeps the
    URL sealed, never in clear."""
    with slack_api() as api:
        api.failing_replies = 2
        with serving(world, ServeConfig(checkpoint_every=None, slack=(_route(api),))) \
                as server:
            buttons = _posted_buttons(world, api, "t6", "refund-6", "refund",
                                      {"order": "o-66", "cents": 123456})
            url = api.base + "actions/T1/1066/s3cr3t-hook-path"
            ok = click(server, buttons["approve"], response_url=url)
            wait_until(lambda: api.replies, what="the message replaced")
            mail = _posted_buttons(world, api, "t7", "mail-7", "send_email",
                                   {"to": "x@example.org", "subject": "s", "body": "b"})
            denied = click(server, mail["deny"], user="U0BOB", response_url=url + "-2")
            wait_until(lambda: len(api.replies) == 2, what="the second message replaced")
    assert ok.status_code == denied.status_code == 200
    assert api.problems == []
    assert api.reply_attempts == 4  # two 500s, then each accepted once
    (path, first), (path2, second) = api.replies
    assert path == "/actions/T1/1066/s3cr3t-hook-path" and path2.endswith("-2")
    assert first["replace_original"] is True
    assert first["text"] == "refund: Approved by alice"
    assert second["text"] == "send_email: Denied (it will not run) by bob"
    whole = json.dumps(api.replies)
    assert "o-66" not in whole and "123456" not in whole  # never an argument value
    actions = [e["action_id"] for b in first["blocks"] if b["type"] == "actions"
               for e in b["elements"]]
    assert actions == ["open"]  # no Approve/Deny left to click
    entries = [e for e in world.audit() if e.event == "operator_slack_reply"]
    assert [(e.actor, e.call_id) for e in entries] == [
        ("operator:alice", "refund-6"), ("operator:bob", "mail-7")]
    assert "s3cr3t" not in json.dumps([e.detail for e in world.audit()])


def test_a_reply_not_delivered_before_a_restart_is_delivered_after_it(world: World) -> None:
    with slack_api() as api:
        api.failing_replies = 10**6  # Slack down for the whole first run
        with serving(world, ServeConfig(checkpoint_every=None, slack=(_route(api),))) \
                as server:
            buttons = _posted_buttons(world, api, "t6", "refund-6", "refund",
                                      {"order": "o-66", "cents": 1})
            assert click(server, buttons["approve"],
                         response_url=api.base + "actions/T1/9/x").status_code == 200
            wait_until(lambda: api.reply_attempts >= 2, what="the reply tried")
        assert api.replies == []
        api.failing_replies = 0
        with serving(world, ServeConfig(checkpoint_every=None, slack=(_route(api),))):
            wait_until(lambda: api.replies, what="the reply delivered after the restart")
    assert [b["text"] for _, b in api.replies] == ["refund: Approved by alice"]
