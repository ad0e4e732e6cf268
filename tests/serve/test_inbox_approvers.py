"""Who a policy lets approve, as the inbox, the API and ``pending`` offer it, over real
HTTP on loopback (SQLite, and PostgreSQL when configured).

One judgement decides what an operator may do to a call (``InboxService.rights``:
their rights over the tool, an escalation's role, then ``Policy.approval_refusal``
and ``denial_refusal``, the same the answer meets when posted): a tool's
``approvers:``, the principal's own call, and a rule's ``approval: approvers: roles``
(for denials too under ``deny: quorum``). What it refuses is not offered (no tick box,
no Approve nor edit form, ``may_approve`` false), and what is offered is taken. A call
one may deny but not approve is still "mine" (a Deny form, no box); one they may
neither approve nor deny is left out of "only mine" and ``pending --operator`` in the
statement, so counts and ``--limit`` hold only what is shown.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from click.testing import CliRunner
from serve_world import (
    MAIL_RULE,
    POLICY,
    REFUND_REASON,
    build_world,
    call_ids,
    listed_total,
    logged_in,
    picked,
    serving,
)

from agent_gate.cli import main as cli

APPROVERS = ("version: 1\noperators:\n  carol: {roles: [finance]}\n  bob: {roles: [support]}\n"
             + POLICY.removeprefix("\nversion: 1\n")
             .replace(MAIL_RULE, "        approval: {editable: [subject, body], "
                                 "approvers: {roles: [finance]}}\n")
             .replace(REFUND_REASON, REFUND_REASON + "        approval: {approvers: "
                                     "{min: 1, roles: [finance], deny: quorum}}\n"))
"""A mail is approved only by finance (anyone with rights may deny it: deny: any); a
refund's denials count like approvals (deny: quorum), so only finance answers it."""


def test_an_approver_rule_decides_what_is_offered_and_what_is_taken(
        db_url: str, tmp_path: Path) -> None:
    world = build_world(db_url, tmp_path, APPROVERS, {
        "bob": {"approve": ["send_email", "refund"]},
        "carol": {"approve": ["send_email", "refund"]}}, body="Dear Ana")
    assert world.call("shop", "r-1", "refund", {"order": "o-1", "cents": 500},
                      principal="dave") == "awaiting_approval"
    mail, mail_hash = world.shown("t1", "mail-1")
    refund, refund_hash = world.shown("shop", "r-1")
    with serving(world, tools=True) as server:
        with logged_in(server, world, "bob") as (http, _):
            everything = http.get("/inbox").text
            mine = http.get("/inbox", params={"mine": "1"}).text
            rows = http.get("/inbox/rows", params={"mine": "1"}).text
            mail_page = http.get(f"/inbox/calls/{mail}").text
            refund_page = http.get(f"/inbox/calls/{refund}").text
        with logged_in(server, world, "carol") as (http, _):
            carols = http.get("/inbox", params={"mine": "1"}).text
            carols_page = http.get(f"/inbox/calls/{mail}").text
        with httpx.Client(base_url=server.base,
                          headers={"Authorization": f"Bearer {world.tokens['bob']}"}) as api:
            api_all = api.get("/api/inbox").json()
            api_mine = api.get("/api/inbox", params={"mine": "1"}).json()
            # what is not offered is refused when asked anyway, in the offer's words
            approve = api.post(f"/api/calls/{mail}/approve", json={"args_hash": mail_hash})
            deny_refund = api.post(f"/api/calls/{refund}/deny",
                                   json={"args_hash": refund_hash})
            # what is offered is taken: bob may deny the mail
            deny_mail = api.post(f"/api/calls/{mail}/deny", json={"args_hash": mail_hash})

    # bob reads everything, and may approve none of it: no tick box.
    assert call_ids(everything) == ["mail-1", "r-1"] and picked(everything) == set()
    # Only mine: the mail (he may deny it), not the refund, in the rows and the counts.
    assert call_ids(mine) == ["mail-1"] and listed_total(mine) == 1
    assert "refund <b>" not in mine
    assert call_ids(rows) == ["mail-1"] and listed_total(rows) == 1
    # The mail's page: Deny, and why not Approve; no Approve, no edit form.
    assert 'class="deny"' in mail_page and 'class="approve"' not in mail_page
    assert 'class="edit"' not in mail_page
    assert "You may deny this call but not approve it" in mail_page
    assert "holds none of the roles the quorum counts (finance)" in mail_page
    # The refund's page: no form at all, and why.
    assert 'class="answer"' not in refund_page and "holds none of the roles" in refund_page
    # carol (finance) may approve the mail: a box, Approve, the edit form.
    assert call_ids(carols) == ["mail-1", "r-1"] and picked(carols) == {mail, refund}
    assert 'class="approve"' in carols_page and 'class="edit"' in carols_page
    # The API says the same, per row.
    assert {r["call_id"]: (r["may_approve"], r["may_deny"], r["may_answer"])
            for r in api_all["rows"]} == {"mail-1": (False, True, True),
                                           "r-1": (False, False, False)}
    assert [r["call_id"] for r in api_mine["rows"]] == ["mail-1"]
    assert api_mine["counts"]["total"] == 1
    assert approve.status_code == 403
    assert "holds none of the roles the quorum counts" in approve.json()["detail"]
    assert deny_refund.status_code == 403
    assert "holds none of the roles the quorum counts" in deny_refund.json()["detail"]
    assert deny_mail.status_code == 200, deny_mail.text


def test_pending_for_an_operator_leaves_out_what_they_may_not_answer(
        db_url: str, tmp_path: Path) -> None:
    """``pending --operator bob --newest-first --limit 1``: the newest call is a refund
    bob may neither approve nor deny, so the one row is the mail, and no "more" line
    follows it, since nothing else is his."""
    world = build_world(db_url, tmp_path, APPROVERS, {
        "bob": {"approve": ["send_email", "refund"]}}, body="Dear Ana")
    assert world.call("shop", "r-1", "refund", {"order": "o-1", "cents": 500},
                      principal="dave") == "awaiting_approval"
    got = CliRunner().invoke(cli, ["pending", "--db", world.url, "--policy",
                                   str(world.policy), "--operator", "bob", "--newest-first",
                                   "--limit", "1", "--json"], catch_exceptions=False)
    assert got.exit_code == 0, got.output
    shown = [json.loads(line)["call_id"] for line in got.stdout.splitlines() if line.strip()]
    assert shown == ["mail-1"]
