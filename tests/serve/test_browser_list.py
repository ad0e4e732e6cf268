"""The inbox's list in a real headless Chromium (Debian's ``chromium``, Playwright):
paging, filtering, ticking rows and answering them at once, a new call appearing
without a reload, and the keyboard.

``AGENT_GATE_SCREENSHOT_DIR=DIR`` also saves the list as ``DIR/inbox-list.png`` (how
docs/inbox-list.png was taken).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from serve_world import Running, World

from agent_gate import Principal
from agent_gate.ledger import Ledger

pytestmark = pytest.mark.slow



def record(world: World, calls: list[tuple[str, str, str, dict[str, Any]]]) -> None:
    with world.gate() as gate:
        for task, call_id, name, arguments in calls:
            out = gate.execute(task, {"call_id": call_id, "name": name, "arguments": arguments},
                               principal=Principal(id="zoe"))
            assert out.state.value == "awaiting_approval"


def mails(n: int, task: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    return [(task, f"m-{i:03d}", "send_email",
             {"to": f"u{i}@example.org", "subject": "Your order", "body": f"Dear customer {i}"})
            for i in range(n)]


def log_in(browser: Any, server: Running, world: World, name: str, path: str = "/inbox") -> Any:
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.errors = errors
    page.goto(server.base + "/login")
    page.fill("#token", world.tokens[name])
    page.click("#login")
    page.wait_for_url(server.base + "/inbox")
    if path != "/inbox":
        page.goto(server.base + path)
    return page


def call_ids(page: Any) -> list[str]:
    return [t.strip() for t in page.locator("#rows tr.row td.call-id").all_text_contents()]


def approvals(world: World, task: str, call_id: str) -> list[str]:
    with Ledger(world.url) as ledger:
        d = ledger.call_details(task, call_id)
    assert d is not None
    return [f"{a.verdict}:{a.decided_by}" for a in d.approvals]


def test_paging_and_filtering_in_the_browser(world: World, server: Running, browser: Any,
                                            ) -> None:
    record(world, [*mails(30, "shop"), ("refunds", "r-1", "refund", {"order": "o", "cents": 9})])
    page = log_in(browser, server, world, "alice", "/inbox?limit=25")
    first = call_ids(page)
    assert len(first) == 25 and first[0] == "mail-1"  # oldest first
    with page.expect_navigation():
        page.click("#next-page")
    second = call_ids(page)
    assert second == [f"m-{i:03d}" for i in range(24, 30)] + ["r-1"]
    with page.expect_navigation():
        page.click("#prev")
    assert call_ids(page) == first
    # Counts at the top lead to their filter; the filter form too.
    assert page.text_content("#total") == "32"
    with page.expect_navigation():
        page.click("#counts a.facet.tool:has-text('refund')")
    assert call_ids(page) == ["r-1"]
    page.goto(server.base + "/inbox")
    page.fill("#q", "m-02")
    with page.expect_navigation():
        page.click("#filter")
    assert call_ids(page) == [f"m-02{i}" for i in range(10)]
    if os.environ.get("AGENT_GATE_SCREENSHOT_DIR"):
        page.goto(server.base + "/inbox?limit=25")
        page.locator("#rows input[name=pick]").nth(1).check()
        page.locator("#rows input[name=pick]").nth(2).check()
        page.screenshot(path=str(Path(os.environ["AGENT_GATE_SCREENSHOT_DIR"]) /
                                 "inbox-list.png"), full_page=False)
    assert page.errors == []


def test_tick_rows_and_answer_them_at_once(world: World, server: Running, browser: Any,
                                          ) -> None:
    record(world, [*mails(3, "shop"), ("refunds", "r-1", "refund", {"order": "o", "cents": 9})])
    page = log_in(browser, server, world, "bob", "/inbox?task=shop")
    assert page.locator("#rows input[name=pick]").count() == 3
    for i in (0, 2):
        page.locator("#rows input[name=pick]").nth(i).check()
    page.fill("#bulk input[name=reason]", "read them all")
    with page.expect_navigation():
        page.click("#approve-selected")
    assert page.url == server.base + "/inbox?task=shop"  # where the person was
    results = page.locator("#results tr.result")
    assert results.count() == 2
    assert page.locator("#results tr.result.done").count() == 2
    assert call_ids(page) == ["m-001"]
    assert approvals(world, "shop", "m-000") == ["approved:bob"]
    assert approvals(world, "shop", "m-001") == []
    assert approvals(world, "shop", "m-002") == ["approved:bob"]
    # bob may not answer refunds: no box to tick on its row.
    page.goto(server.base + "/inbox?task=refunds")
    assert call_ids(page) == ["r-1"] and page.locator("#rows input[name=pick]").count() == 0


def test_a_new_call_appears_without_a_reload(world: World, server: Running, browser: Any,
                                            ) -> None:
    page = log_in(browser, server, world, "bob")
    assert call_ids(page) == ["mail-1"]
    page.locator("#rows input[name=pick]").first.check()  # a tick survives the refresh
    marker = page.evaluate("() => { window.stillHere = 1; return performance.timeOrigin; }")
    record(world, [("late", "late-1", "send_email", {"to": "x@y.org", "subject": "s",
                                                     "body": "b"})])
    page.wait_for_selector("#rows tr.row.new:has-text('late-1')", timeout=30_000)
    assert call_ids(page) == ["mail-1", "late-1"]
    assert page.text_content("#total") == "2"
    assert page.evaluate("() => [window.stillHere, performance.timeOrigin]") == [1, marker]
    assert page.locator("#rows input[name=pick]").first.is_checked()
    assert page.errors == []


def test_the_keyboard_moves_ticks_opens_and_answers(world: World, server: Running,
                                                   browser: Any) -> None:
    record(world, mails(3, "keys"))
    page = log_in(browser, server, world, "bob", "/inbox?task=keys")
    page.keyboard.press("j")  # the second row
    with page.expect_navigation():
        page.keyboard.press("a")  # nothing ticked: the marked row
    assert approvals(world, "keys", "m-001") == ["approved:bob"]
    assert call_ids(page) == ["m-000", "m-002"]
    with page.expect_navigation():
        page.keyboard.press("o")  # open the marked (first) row
    assert "/inbox/calls/" in page.url
    with page.expect_navigation():
        page.keyboard.press("n")  # the next call of the same list
    assert page.locator("div.card.call .call-id").text_content() == "m-002"
    with page.expect_navigation():
        page.keyboard.press("d")  # deny it: back to the list
    assert page.url == server.base + "/inbox?task=keys"
    assert approvals(world, "keys", "m-002") == ["denied:bob"]
    assert call_ids(page) == ["m-000"]
    assert page.errors == []
