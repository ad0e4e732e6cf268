"""Slack for the calls only a role may answer, over the loopback Slack API of
``test_slack`` (SQLite, and PostgreSQL when configured).

The channel's message says who may answer before anyone clicks: a rule counting only
finance's approvals ("Needs approval by finance (2 distinct)"), an escalation when the
deadline passed ("Escalated to finance: only finance may answer", posted to the routes
of that role only, its buttons kept for the role's holders). A click by someone who may
not answer is refused as the inbox refuses it (audited ``approval_refused`` under their
name), and told why through its ``response_url`` in an ephemeral note, the message
left as it was; the answer of one who may still replaces the message clicked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from serve_world import MAIL_RULE, TWO_DESKS, World, build_world, serving
from sqlalchemy import text
from test_slack import SlackApi, click, slack_api
from waiting import wait_until

from agent_gate.ledger import Ledger
from agent_gate.serve.slack import SlackRoute
from agent_gate.serve.webhooks import ServeConfig

pytest.importorskip("slack_sdk")

ROLES = TWO_DESKS.replace(MAIL_RULE, "        approval: {editable: [subject, body], "
                                      "approvers: {roles: [finance], min: 2}}\n")
"""A refund escalates to finance after 1 s; a mail counts two finance approvers (and a
charge nobody answers escalates to legal after an hour: the legal route's role)."""
VALUES = ("o-1", "98765", "ana@elsewhere.org", "Dear Ana")


@pytest.fixture(autouse=True)
def _secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_GATE_SLACK_TOKEN", "xoxb-test-token")
    monkeypatch.setenv("AGENT_GATE_SLACK_SIGNING_SECRET", "slack-signing-secret-for-tests")


def _route(api: SlackApi, name: str, channel: str, events: tuple[str, ...],
           roles: tuple[str, ...]) -> SlackRoute:
    return SlackRoute(name=name, channel=channel, token_env="AGENT_GATE_SLACK_TOKEN",
                      signing_secret_env="AGENT_GATE_SLACK_SIGNING_SECRET",
                      users={"U0CAROL": "carol", "U0BOB": "bob"}, api_url=api.url,
                      events=events, roles=roles, backoff=0.05, max_backoff=0.2,
                      poll=0.05, response_url_prefix=api.base)


def _cursor(world: World, name: str) -> int | None:
    with Ledger(world.url) as ledger, ledger.engine.connect() as conn:
        return conn.execute(text("SELECT seq FROM webhook_cursors WHERE name = :n"),
                            {"n": name}).scalar()


def _section(message: dict[str, Any]) -> str:
    return str(message["blocks"][0]["text"]["text"])


def _buttons(message: dict[str, Any]) -> dict[str, str]:
    return {e["action_id"]: e.get("value", "") for b in message["blocks"]
            if b["type"] == "actions" for e in b["elements"]}


def test_the_message_says_who_may_answer_and_a_refused_click_is_told_why(
        db_url: str, tmp_path: Path) -> None:
    world = build_world(db_url, tmp_path, ROLES, {
        "carol": {"approve": ["refund", "send_email"]},
        "bob": {"approve": ["refund", "send_email"]}}, body="Dear Ana")
    with slack_api() as api:
        config = ServeConfig(checkpoint_every=None, sweep_every=0.2, slack=(
            _route(api, "approvals", "C0APPROVALS", ("awaiting_approval", "escalated"),
                   ("finance",)),
            _route(api, "legal", "C0LEGAL", ("escalated",), ("legal",))))
        with serving(world, config) as server:
            wait_until(lambda: None not in (_cursor(world, "slack:approvals"),
                                            _cursor(world, "slack:legal")),
                       what="both routes' cursors")
            assert world.call("t2", "m-2", "send_email", {
                "to": "ana@elsewhere.org", "subject": "s", "body": "Dear Ana"},
                principal="dave") == "awaiting_approval"
            assert world.call("shop", "r-1", "refund", {"order": "o-1", "cents": 98765},
                              principal="dave") == "awaiting_approval"
            wait_until(lambda: len(api.posts) >= 3, timeout=30,
                       what="the two waiting calls and the refund's escalation")
            escalated = [e.seq for e in world.audit() if e.event == "approval_escalated"]
            wait_until(lambda: (_cursor(world, "slack:legal") or 0) >= escalated[0],
                       what="the legal route to read past the escalation")
            mail, refund, escalation = api.posts
            hook = api.base + "actions/T1/"
            # bob holds no role: refused, told why, each message left as it was
            not_finance = click(server, _buttons(refund)["approve"], user="U0BOB",
                                response_url=hook + "1")
            no_quorum_role = click(server, _buttons(mail)["approve"], user="U0BOB",
                                   response_url=hook + "2")
            stranger = click(server, _buttons(mail)["deny"], user="U0NOBODY",
                             response_url=hook + "3")
            wait_until(lambda: len(api.replies) == 3, what="three ephemeral notes")
            # carol holds finance: her click on the waiting message answers and replaces it
            ok = click(server, _buttons(refund)["approve"], user="U0CAROL",
                       response_url=hook + "4")
            wait_until(lambda: len(api.replies) == 4, what="the message replaced")
    assert api.problems == []
    assert [m["channel"] for m in api.posts] == ["C0APPROVALS"] * 3  # legal heard nothing
    assert "*Needs approval by finance (2 distinct)*" in _section(mail)
    assert "Needs approval" not in _section(refund)  # anyone with rights, until it escalates
    assert "refund" in _section(escalation)
    assert "*Escalated to finance: only finance may answer*" in _section(escalation)
    assert "only its holders may answer" in escalation["text"]
    # the escalation keeps Approve and Deny, for the very call and arguments
    assert {k: v for k, v in _buttons(escalation).items() if k != "open"} == \
        {k: v for k, v in _buttons(refund).items() if k != "open"}
    assert all(v not in json.dumps(api.posts) for v in VALUES)

    assert {not_finance.status_code, no_quorum_role.status_code, stranger.status_code,
            ok.status_code} == {200}
    assert "does not hold it" in not_finance.json()["text"]
    notes = dict(api.replies)
    for path in ("/actions/T1/1", "/actions/T1/2", "/actions/T1/3"):
        assert notes[path]["response_type"] == "ephemeral"
        assert notes[path]["replace_original"] is False
        assert notes[path]["text"].startswith("Not answered: ")
    assert "escalated to role 'finance' when its deadline passed, and 'bob' does not " \
        "hold it" in notes["/actions/T1/1"]["text"]
    assert "'bob' holds none of the roles the quorum counts (finance)" in \
        notes["/actions/T1/2"]["text"]
    assert "not an agent-gate operator" in notes["/actions/T1/3"]["text"]
    answered = notes["/actions/T1/4"]
    assert answered["replace_original"] is True and "response_type" not in answered
    assert answered["text"] == "refund: Approved by carol"
    assert all(v not in json.dumps(api.replies) for v in VALUES)

    # The ledger records the refusals as the inbox does, under the clicker's name.
    trail = world.audit()
    refusals = [(e.actor, e.call_id) for e in trail if e.event == "approval_refused"]
    assert refusals == [("operator:bob", "r-1"), ("operator:bob", "m-2")]
    assert [e.actor for e in trail if e.event == "operator_slack_answer"] == \
        ["slack:U0NOBODY"]
    with Ledger(world.url) as ledger:
        refund_done = ledger.call_details("shop", "r-1")
        mail_waits = ledger.call_details("t2", "m-2")
    assert refund_done is not None and mail_waits is not None
    assert [a.decided_by for a in refund_done.approvals] == ["carol"]
    assert mail_waits.approvals == () and mail_waits.call.state.value == "awaiting_approval"
