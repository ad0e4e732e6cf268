"""Signed in by the identity provider, in a real headless Chromium (Debian's
``chromium``, driven by Playwright): every request of the browser carries the proxy's
assertion (as Cloudflare Access adds it in front of the server), so there is no login
form; the operator named by its email reads the waiting call and approves it, and
the approval is theirs. A browser whose assertion has expired sees a refusal that
says nothing of it, and no list."""

from __future__ import annotations

from typing import Any

import pytest
from identity_world import HEADER, config, decided_by, provider
from serve_world import World, serving

pytestmark = pytest.mark.slow


def test_the_proxy_signs_the_browser_in_and_its_operator_approves(
        world: World, browser: Any) -> None:
    with provider() as idp, serving(world, config(idp)) as server:
        signed = browser.new_context(
            extra_http_headers={HEADER: idp.sign()})
        page = signed.new_page()
        page.goto(server.base + "/inbox")
        assert page.url == server.base + "/inbox"  # no login form on the way
        assert page.text_content("#operator") == "dana@example.com"
        ref, _ = world.shown("t1", "mail-1")
        page.click(f"#row-{ref} a.call-link")
        page.wait_for_url(server.base + f"/inbox/calls/{ref}")
        card = f"#call-{ref}"
        page.fill(f"{card} input[name=reason]", "read it")
        with page.expect_navigation(url=server.base + "/inbox"):
            page.click(f"{card} button.approve")
        message = page.text_content("#message") or ""

        expired = idp.sign(idp.claims(exp=1_000_000_000))
        stale = browser.new_context(
            extra_http_headers={HEADER: expired}).new_page()
        answer = stale.goto(server.base + "/inbox")
        refused = stale.text_content("body") or ""
    assert "Approved call mail-1" in message
    assert decided_by(world, "t1", "mail-1") == ["dana@example.com"]
    assert answer is not None and answer.status == 401
    assert "not accepted" in refused and "mail-1" not in refused and expired not in refused
