"""A call escalated to a role, as the inbox and the API list it to people with and
without the role, over real HTTP on loopback (SQLite, and PostgreSQL when configured).

Every operator reads the whole list (as they read tasks and the trail); what they may
act on is what ``answers.answerable`` and the escalation check let them answer: only
those rows carry a tick box, only those calls' pages an answer form, and "only mine"
(``mine=1``, the API's too) holds only those, counted in the same statement.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner
from serve_world import (
    ESCALATING,
    World,
    build_world,
    call_ids,
    listed_total,
    logged_in,
    picked,
    serving,
)
from waiting import wait_until

from agent_gate.cli import main as cli
from agent_gate.ledger import Ledger
from agent_gate.serve.webhooks import ServeConfig


def _escalated(world: World, task: str, call_id: str) -> bool:
    with Ledger(world.url) as ledger:
        rec = ledger.get(task, call_id)
        found = ledger.deadline(rec) if rec is not None else None
    return found is not None and found.escalated


def _sweep_until_escalated(world: World, task: str, call_id: str) -> None:
    """``agent-gate approvals sweep`` (one pass each time) until the call is escalated:
    its deadline is a second long by the database's clock, which no test can move."""
    def swept() -> bool:
        got = CliRunner().invoke(cli, ["approvals", "sweep", "--db", world.url, "--json",
                                       "--by", "escalation-test"], catch_exceptions=False)
        assert got.exit_code == 0, got.output
        json.loads(got.output)
        return _escalated(world, task, call_id)
    wait_until(swept, timeout=30, what=f"{call_id} to be escalated by a sweep")


def test_an_escalated_call_is_offered_only_to_the_roles_holders(
        db_url: str, tmp_path: Path) -> None:
    # alice approves every tool but holds no role; carol approves refunds, role finance
    world = build_world(db_url, tmp_path, ESCALATING, {
        "alice": {"approve": ["*"]}, "carol": {"approve": ["refund"]}}, body="Dear Ana")
    # (for dave: alice may not approve the calls of a task acting for her)
    assert world.call("shop", "r-1", "refund", {"order": "o-1", "cents": 500},
                      principal="dave") == "awaiting_approval"
    _sweep_until_escalated(world, "shop", "r-1")
    # a later refund: its own deadline is armed but no sweep runs again, so it waits
    assert world.call("shop", "r-2", "refund", {"order": "o-2", "cents": 700},
                      principal="dave") == "awaiting_approval"
    escalated, _ = world.shown("shop", "r-1")
    plain, _ = world.shown("shop", "r-2")
    with serving(world, ServeConfig(sweep_every=None, checkpoint_every=None)) as server:
        with logged_in(server, world, "alice") as (http, _):
            everything = http.get("/inbox").text
            mine = http.get("/inbox", params={"mine": "1"}).text
            mine_refunds = http.get("/inbox", params={"mine": "1", "tool": "refund"}).text
            rows = http.get("/inbox/rows", params={"mine": "1"}).text
            page = http.get(f"/inbox/calls/{escalated}").text
        with logged_in(server, world, "carol") as (http, _):
            carols = http.get("/inbox", params={"mine": "1"}).text
            carols_page = http.get(f"/inbox/calls/{escalated}").text
        api = httpx.Client(base_url=server.base)
        alice = {"Authorization": f"Bearer {world.tokens['alice']}"}
        carol = {"Authorization": f"Bearer {world.tokens['carol']}"}
        api_all = api.get("/api/inbox", headers=alice).json()
        api_mine = api.get("/api/inbox", params={"mine": "1"}, headers=alice).json()
        api_carol = api.get("/api/inbox", params={"mine": "1"}, headers=carol).json()
        # What the list does not offer, the server refuses when asked anyway.
        by_hand = api.post(f"/api/calls/{escalated}/approve", headers=alice,
                           json={"args_hash": world.shown("shop", "r-1")[1]})
        api.close()

    # Everything, read-only: the escalated refund is listed, with no box for alice.
    assert call_ids(everything) == ["mail-1", "r-1", "r-2"]
    assert escalated not in picked(everything) and plain in picked(everything)
    assert "escalated to finance" in everything
    # Only mine: left out of the rows and of the counts (one statement: not after fetch).
    assert call_ids(mine) == ["mail-1", "r-2"] and listed_total(mine) == 2
    assert 'refund <b>1</b>' in mine and "refunds-need-a-person <b>1</b>" in mine
    assert call_ids(mine_refunds) == ["r-2"]
    assert call_ids(rows) == ["mail-1", "r-2"] and listed_total(rows) == 2
    # The call's page shows it whole, says who answers it, and offers alice no form.
    assert 'class="answer"' not in page and 'class="edit"' not in page
    assert "Escalated to role finance, which you do not hold" in page
    # carol holds the role: hers to answer, in her list, with a box and a form.
    assert call_ids(carols) == ["r-1", "r-2"] and escalated in picked(carols)
    assert 'class="answer"' in carols_page and "which you do not hold" not in carols_page
    # The API's listing says the same.
    assert {r["call_id"]: r["may_answer"] for r in api_all["rows"]} == {
        "mail-1": True, "r-1": False, "r-2": True}
    assert [r["call_id"] for r in api_mine["rows"]] == ["mail-1", "r-2"]
    assert api_mine["counts"]["total"] == 2
    assert [(r["call_id"], r["may_answer"]) for r in api_carol["rows"]] == [
        ("r-1", True), ("r-2", True)]
    assert by_hand.status_code == 403
    assert "escalated to role 'finance'" in by_hand.json()["detail"]


def test_without_a_policy_file_nobody_is_offered_an_escalated_call(
        db_url: str, tmp_path: Path) -> None:
    """A server without ``--policy`` knows nobody's roles: the answer is refused to
    everyone (``gate.desk``), so nobody's "only mine" holds the call nor their page a form."""
    world = build_world(db_url, tmp_path, ESCALATING, {
        "carol": {"approve": ["refund"]}}, body="Dear Ana")
    assert world.call("shop", "r-1", "refund", {"order": "o-1", "cents": 500}) \
        == "awaiting_approval"
    _sweep_until_escalated(world, "shop", "r-1")
    escalated, _ = world.shown("shop", "r-1")
    with serving(world, ServeConfig(sweep_every=None, checkpoint_every=None),
                 policy=False) as server, logged_in(server, world, "carol") as (http, _):
        mine: Any = http.get("/inbox", params={"mine": "1"}).text
        page = http.get(f"/inbox/calls/{escalated}").text
    assert call_ids(mine) == [] and listed_total(mine) == 0
    assert 'class="answer"' not in page and "which you do not hold" in page
