"""The web inbox in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

An operator logs in with their token, opens the waiting call, reads its arguments,
approves it, and the agent's next resume runs it once. A page on another origin
that posts a forged approval form in the same browser (where the operator is logged
in) is refused and audited, and its call keeps waiting.

``AGENT_GATE_SCREENSHOT=PATH`` also saves the inbox as the operator first sees it
(how docs/inbox.png was taken).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from serve_world import Running, World

pytestmark = pytest.mark.slow

CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium") or "")
                 if p and os.access(p, os.X_OK)), None)
if CHROMIUM is None:
    pytest.skip("no chromium binary (Debian: apt-get install -y chromium chromium-driver)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


@contextmanager
def forged_page(target: str) -> Iterator[str]:
    """A page on another origin whose script posts an approval form to ``target``."""
    html = (f'<!doctype html><form method="post" action="{target}">'
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
    page.click(f"{card} a.call-link")
    page.wait_for_url(server.base + f"/inbox/calls/{ref}")
    shown = json.loads(page.text_content(f"{card} pre.arguments") or "")
    assert shown == {"to": "ana@elsewhere.org", "subject": "Refund", "body": "Dear Ana"}
    page.fill(f"{card} input[name=reason]", "the customer asked for it")
    page.select_option(f"{card} select[name=expires_in]", "2h")
    page.click(f"{card} button.approve")
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
