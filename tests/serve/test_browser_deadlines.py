"""Approval deadlines in a real headless Chromium (Debian's ``chromium``, Playwright):
the list shows each wait's countdown (a ``<time>`` with the deadline, rendered on the
server: the page's CSP runs no other script), a deadline expires into a denial when
``agent-gate approvals sweep`` runs, the open list drops the row without a reload, the
call's page says why, and a call escalated to a role shows it and offers no answer to
an operator without the role.

The database's clock cannot be moved: the short deadlines are a second long and the
test polls, bounded, until the sweep has acted. No sleep.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from serve_world import POLICY, Running, World, serving
from waiting import wait_until

from agent_gate.cli import main as cli
from agent_gate.ledger import Ledger
from agent_gate.ledger.records import CallRecord
from agent_gate.serve.webhooks import ServeConfig

pytestmark = pytest.mark.slow

# the mail rule's approval block gains a deadline beside what it already lets the
# approver do (serve_world's POLICY: editable fields)
MAIL_BLOCK = "        approval: {editable: [subject, body]}\n"
assert MAIL_BLOCK in POLICY
LONG = POLICY.replace(MAIL_BLOCK, "        approval: {editable: [subject, body], timeout: 30m}\n")
SHORT = ("version: 1\noperators:\n  carol: {roles: [finance]}\n" + POLICY.removeprefix(
    "\nversion: 1\n")).replace(
    MAIL_BLOCK, "        approval: {editable: [subject, body], timeout: 1s}\n").replace(
    "        reason: Refunds are approved by finance.\n",
    "        reason: Refunds are approved by finance.\n"
    "        approval: {timeout: 1s, then: {escalate: finance}}\n")


def log_in(browser: Any, server: Running, world: World, name: str) -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.errors = errors
    page.goto(server.base + "/login")
    page.fill("#token", world.tokens[name])
    page.click("#login")
    page.wait_for_url(server.base + "/inbox")
    return page


def due_at(world: World, task: str, call_id: str) -> str:
    with Ledger(world.url) as ledger:
        found = ledger.deadline(ledger.get(task, call_id))
    assert found is not None
    return found.due_at.isoformat()


def sweep_until(world: World, task: str, call_id: str, what: str,
                done: Callable[[Ledger, CallRecord], bool]) -> None:
    """``agent-gate approvals sweep`` (one pass each time) until ``done`` holds of the call."""
    def swept() -> bool:
        got = CliRunner().invoke(cli, ["approvals", "sweep", "--db", world.url, "--json",
                                       "--by", "browser-test"], catch_exceptions=False)
        assert got.exit_code == 0, got.output
        json.loads(got.output)
        with Ledger(world.url) as ledger:
            rec = ledger.get(task, call_id)
            return rec is not None and done(ledger, rec)
    wait_until(swept, timeout=30, what=f"{call_id} to be {what} by a sweep")


def _escalated(ledger: Ledger, rec: CallRecord) -> bool:
    found = ledger.deadline(rec)
    return found is not None and found.escalated


def test_a_deadline_counts_down_and_expires_into_a_denial(world: World, browser: Any,
                                                         tmp_path: Path) -> None:
    world.policy.write_text(LONG)
    assert world.call("slow", "m-long", "send_email",
                      {"to": "a@b.org", "subject": "s", "body": "b"}) == "awaiting_approval"
    world.policy.write_text(SHORT)
    assert world.call("fast", "m-short", "send_email",
                      {"to": "c@d.org", "subject": "s", "body": "b"}) == "awaiting_approval"
    assert world.call("fast", "r-1", "refund", {"order": "o-1", "cents": 500}) \
        == "awaiting_approval"
    with serving(world, ServeConfig(sweep_every=None, checkpoint_every=None)) as server:
        page = log_in(browser, server, world, "alice")
        # The countdown: the deadline as a <time>, and the minutes left, from the server.
        long_row = page.locator("#rows tr.row:has-text('m-long')")
        stamp = long_row.locator("td.deadline time")
        assert stamp.get_attribute("datetime") == due_at(world, "slow", "m-long")
        assert stamp.text_content() in ("29m left, then deny", "30m left, then deny")
        short = page.locator("#rows tr.row:has-text('m-short') td.deadline time")
        assert short.get_attribute("datetime") == due_at(world, "fast", "m-short")
        assert page.locator("#rows tr.row:has-text('mail-1') td.deadline time").count() == 0
        if os.environ.get("AGENT_GATE_SCREENSHOT_DIR"):
            page.screenshot(path=str(Path(os.environ["AGENT_GATE_SCREENSHOT_DIR"])
                                     / "inbox-deadlines.png"), full_page=False)

        sweep_until(world, "fast", "m-short", "rejected",
                    lambda _ledger, rec: rec.state.value == "rejected")
        # r-1 was recorded after m-short, so its second ends a little later: a pass
        # between the two left it waiting, and the server runs no sweep of its own here.
        sweep_until(world, "fast", "r-1", "escalated", _escalated)
        # The open list drops the denied call without a reload (its poll, ETag)...
        marker = page.evaluate("() => { window.stillHere = 1; return 1; }")
        page.wait_for_selector("#rows tr.row:has-text('m-short')", state="detached",
                               timeout=30_000)
        # ...and shows the refund escalated to finance.
        escalated = page.locator("#rows tr.row:has-text('r-1') td.deadline time")
        escalated.filter(has_text="escalated to finance").wait_for(timeout=30_000)
        assert page.evaluate("() => window.stillHere") == marker
        # The denied call's page says why.
        with Ledger(world.url) as ledger:
            short_ref = ledger.get("fast", "m-short").row_id
            refund_ref = ledger.get("fast", "r-1").row_id
        page.goto(f"{server.base}/inbox/calls/{short_ref}")
        body = page.text_content("body") or ""
        assert "rejected" in body and "nobody answered before the deadline" in body
        assert "sweeper:browser-test" in body
        assert page.locator("form.answer").count() == 0  # nothing left to answer
        # The escalated refund: its page names the role; alice holds approve rights on
        # every tool in serve, but not the finance role the policy gives carol, so her
        # page offers no answer (the server would refuse one: test_inbox_escalated.py).
        page.goto(f"{server.base}/inbox/calls/{refund_ref}")
        assert "only operators holding role finance may answer" in (
            page.text_content("#deadline") or "")
        assert page.locator("form.answer").count() == 0
        assert "Escalated to role finance, which you do not hold" in (
            page.text_content("p.not-yours") or "")
        carol = log_in(browser, server, world, "carol")
        carol.goto(f"{server.base}/inbox/calls/{refund_ref}")
        with carol.expect_navigation():
            carol.click("form.answer button.approve")
        with Ledger(world.url) as ledger:
            d = ledger.call_details("fast", "r-1")
        assert d is not None and [f"{a.verdict}:{a.decided_by}" for a in d.approvals] == [
            "approved:carol"]
        assert page.errors == [] and carol.errors == []
    assert world.runs == []
