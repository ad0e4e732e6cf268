"""The web inbox in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

An operator logs in with their token, opens the waiting call, reads its arguments,
approves it, and the agent's next resume runs it once. A page on another origin
that posts a forged approval form in the same browser (where the operator is logged
in) is refused and audited, and its call keeps waiting.

``AGENT_GATE_SCREENSHOT=PATH`` also saves the inbox as the operator first sees it
(the list; docs/inbox-list.png comes from test_browser_list.py).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from serve_world import Running, World

from agent_gate.ledger import Ledger

pytestmark = pytest.mark.slow



@contextmanager
def forged_page(target: str | bytes) -> Iterator[str]:
    """A page on another origin whose script posts an approval form to ``target``
    (bytes: ``target`` is the page itself)."""
    html = target if isinstance(target, bytes) else (
        f'<!doctype html><form method="post" action="{target}">'
        '<input name="reason" value="forged"><input name="expires_in" value="never">'
        '</form><script>document.forms[0].submit()</script>').encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(html)))
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, *args: object) -> None:
            pass

    evil = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=evil.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{evil.server_address[1]}/"
    finally:
        evil.shutdown()
        evil.server_close()


def test_log_in_read_the_call_approve_it_and_it_runs_once(
        world: World, server: Running, browser: object) -> None:
    assert world.call("t3", "refund-9", "refund", {"order": "o-1042", "cents": 4999},
                      principal="zoe") == "awaiting_approval"
    page = browser.new_page(viewport={"width": 1100, "height": 900})  # type: ignore[attr-defined]
    page.goto(server.base + "/inbox")
    assert page.url == server.base + "/login"
    page.fill("#token", world.tokens["bob"])
    page.click("#login")
    page.wait_for_url(server.base + "/inbox")
    assert page.text_content("#operator") == "bob"
    if os.environ.get("AGENT_GATE_SCREENSHOT"):
        page.screenshot(path=os.environ["AGENT_GATE_SCREENSHOT"], full_page=True)

    ref, _ = world.shown("t1", "mail-1")
    card = f"#call-{ref}"
    page.click(f"#row-{ref} a.call-link")
    page.wait_for_url(server.base + f"/inbox/calls/{ref}")
    shown = json.loads(page.text_content(f"{card} pre.arguments") or "")
    assert shown == {"to": "ana@elsewhere.org", "subject": "Refund", "body": "Dear Ana"}
    page.fill(f"{card} input[name=reason]", "the customer asked for it")
    page.select_option(f"{card} select[name=expires_in]", "2h")
    with page.expect_navigation(url=server.base + "/inbox"):
        page.click(f"{card} button.approve")  # back to the list, the answer on top
    assert "Approved call mail-1" in (page.text_content("#message") or "")

    assert world.runs == []
    with world.gate() as gate:
        assert [o.state.value for o in gate.resume("t1")] == ["succeeded"]
        assert gate.resume("t1") == []
    assert world.runs == ["send_email ana@elsewhere.org"]
    approvals = [e for e in world.audit() if e.call_id == "mail-1" and e.actor == "operator:bob"]
    assert approvals, "the approval is audited under the operator's name"


def test_a_forged_cross_site_post_is_refused(
        world: World, server: Running, browser: object) -> None:
    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(server.base + "/login")
    page.fill("#token", world.tokens["bob"])
    page.click("#login")
    page.wait_for_url(server.base + "/inbox")

    ref, _ = world.shown("t1", "mail-1")
    target = server.base + f"/inbox/calls/{ref}/approve"
    with forged_page(target) as evil:
        with page.expect_response(target) as answer:
            page.goto(evil)
        assert answer.value.status == 403
    refused = [e for e in world.audit() if e.event == "operator_form_approve"]
    assert [(e.call_id, e.detail["allowed"]) for e in refused] == [("mail-1", False)]
    assert refused[0].detail["reason"] in {"not logged in", "the form came from another origin"}
    with world.gate() as gate:
        assert [o.state.value for o in gate.resume("t1")] == ["awaiting_approval"]
    assert world.runs == []


def test_approve_on_a_card_whose_call_id_climbs_out_approves_that_card(
        world: World, server: Running, browser: object) -> None:
    """The reviewed attack: a model names its harmless call ``../t4/refund-big``; on the
    old inbox the card's Approve posted to ``/inbox/calls/t4/../t4/refund-big/approve``,
    which the browser resolves to the large refund beside it."""
    assert world.call("t4", "refund-big", "refund", {"order": "o-9", "cents": 9_999_900},
                      principal="zoe") == "awaiting_approval"
    hostile = "../t4/refund-big"
    assert world.call("t4", hostile, "send_email",
                      {"to": "ana@elsewhere.org", "subject": "Hi", "body": "harmless"},
                      principal="zoe") == "awaiting_approval"
    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(server.base + "/login")
    page.fill("#token", world.tokens["alice"])
    page.click("#login")
    page.wait_for_url(server.base + "/inbox")
    row = page.locator("#rows tr.row", has_text=hostile)
    assert row.count() == 1
    with page.expect_navigation():
        row.locator("a.call-link").click()
    card = page.locator("div.card.call", has_text=hostile)
    assert card.count() == 1
    card.locator("input[name=reason]").fill("a harmless mail")
    with page.expect_navigation():
        card.locator("button.approve").click()
    assert "Approved call ../t4/refund-big (send_email)" in (page.text_content("#message") or "")

    with Ledger(world.url) as ledger:
        mail = ledger.call_details("t4", hostile)
        refund = ledger.call_details("t4", "refund-big")
    assert mail is not None and [a.decided_by for a in mail.approvals] == ["alice"]
    assert refund is not None and refund.approvals == ()  # the refund: untouched
    with world.gate() as gate:
        ran = {o.call_id: o.state.value for o in gate.resume("t4")}
    assert ran == {hostile: "succeeded", "refund-big": "awaiting_approval"}
    assert world.runs == ["send_email ana@elsewhere.org"]


def test_no_other_site_can_frame_the_inbox(
        world: World, server: Running, browser: object) -> None:
    """Clickjacking: a page on another origin frames the inbox; the browser refuses to
    render it there (``frame-ancestors 'none'``, ``X-Frame-Options: DENY``)."""
    html = f'<!doctype html><iframe id="f" src="{server.base}/login"></iframe>'
    page = browser.new_page()  # type: ignore[attr-defined]
    with forged_page(html.encode()) as evil:
        with page.expect_response(server.base + "/login") as framed:
            page.goto(evil)
        assert "frame-ancestors 'none'" in framed.value.headers["content-security-policy"]
        frame = page.frame_locator("#f")
        assert frame.locator("#token").count() == 0  # nothing of the inbox rendered
