"""Approvers read what they approve: one redacted field unsealed on the server for an
operator with rights on the tool, shown once, never cached, each reveal audited; never
a field the policy marks ``reveal: never``; the stand-in for everyone else. Over the
JSON API, the inbox's forms, and ``agent-gate call show --reveal``."""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from serve_world import Running, World, build_world, logged_in, serving

from agent_gate.cli import main as cli

BODY = ("Dear customer,\n\nyour refund of 49.99 EUR for order o-1042 is on its way. "
        "It reaches your card ending 4242 within five days.\n\nKind regards,\nSupport")
POLICY = """
version: 1
tools:
  send_email:
    effect: write
    idempotency: none
    redact:
      - {path: body, preview: 8}
      - {path: subject, reveal: never}
    rules:
      - id: mail-needs-a-person
        effect: approve
        reason: Every mail is read by a person first.
  refund:
    effect: write
    idempotency: none
    rules:
      - {id: refunds-need-a-person, effect: approve}
"""


@pytest.fixture
def sealed(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    """A mail whose body (revealable) and subject (never) the policy redacts."""
    monkeypatch.setenv("AGENT_GATE_SEAL_KEY", base64.b64encode(secrets.token_bytes(32)).decode())
    return build_world(db_url, tmp_path, POLICY, {"bob": {"approve": ["send_email"]},
                                                  "dave": {"approve": ["refund"]}},
                       subject="Refund 4242", body=BODY)


@pytest.fixture
def served(sealed: World) -> Iterator[Running]:
    with serving(sealed) as running:
        yield running


def reveals(world: World) -> list[tuple[str | None, bool, str]]:
    return [(e.actor, e.detail["allowed"], e.detail["field"]) for e in world.audit()
            if e.event == "operator_reveal"]


def test_the_api_reveals_a_field_to_an_operator_with_rights_and_audits_it(
        sealed: World, served: Running) -> None:
    ref, _ = sealed.shown("t1", "mail-1")

    def ask(name: str, field: str) -> httpx.Response:
        return httpx.post(f"{served.base}/api/calls/{ref}/reveal", json={"field": field},
                          headers={"Authorization": f"Bearer {sealed.tokens[name]}"})

    details = httpx.get(f"{served.base}/api/calls/{ref}",
                        headers={"Authorization": f"Bearer {sealed.tokens['bob']}"})
    got, never, none, outside = ask("bob", "body"), ask("bob", "subject"), \
        ask("bob", "to"), ask("dave", "body")
    assert got.status_code == 200 and got.json()["value"] == BODY
    assert got.headers["cache-control"] == "no-store"
    assert never.status_code == 403 and "reveal: never" in never.json()["detail"]
    assert none.status_code == 400 and "no redacted field 'to'" in none.json()["detail"]
    assert outside.status_code == 403 and "no rights on 'send_email'" in outside.json()["detail"]
    assert "your refund" not in details.text and details.json()["redacted"] is True
    assert reveals(sealed) == [("operator:bob", True, "body"), ("operator:bob", False, "subject"),
                               ("operator:bob", False, "to"), ("operator:dave", False, "body")]
    assert "your refund" not in json.dumps([e.detail for e in sealed.audit()])


def test_the_inbox_reveals_on_the_call_page_and_offers_nothing_else(
        sealed: World, served: Running) -> None:
    ref, _ = sealed.shown("t1", "mail-1")
    with logged_in(served, sealed, "bob") as (http, csrf):
        page = http.get(f"/inbox/calls/{ref}").text
        shown = http.post(f"/inbox/calls/{ref}/reveal", data={"csrf": csrf, "field": "body"})
        forged = http.post(f"/inbox/calls/{ref}/reveal", data={"field": "body"})
        again = http.get(f"/inbox/calls/{ref}").text
    with logged_in(served, sealed, "dave") as (http, _):
        outsider = http.get(f"/inbox/calls/{ref}").text
    assert 'data-field="body"' in page and "Reveal body" in page
    assert "subject (never shown)" in page and "Reveal subject" not in page
    assert "your refund" not in page and "Dear cus" in page  # the stand-in's preview
    assert shown.status_code == 200 and shown.headers["cache-control"] == "no-store"
    value = re.search(r'<pre class="arguments revealed-value">(.*?)</pre>', shown.text, re.S)
    assert value is not None and value.group(1).replace("&#39;", "'") == BODY
    assert forged.status_code == 403 and "your refund" not in forged.text
    assert "your refund" not in again  # shown once: not on the next read
    assert "Reveal body" not in outsider and "your rights do not cover send_email" in outsider
    assert [r[:2] for r in reveals(sealed)] == [("operator:bob", True)]


def test_without_the_policy_nothing_is_revealed(sealed: World) -> None:
    with serving(sealed, policy=False) as server:
        ref, _ = sealed.shown("t1", "mail-1")
        got = httpx.post(f"{server.base}/api/calls/{ref}/reveal", json={"field": "body"},
                         headers={"Authorization": f"Bearer {sealed.tokens['bob']}"})
    assert got.status_code == 403 and "--policy" in got.json()["detail"]


def test_call_show_reveal_prints_the_field_for_an_operator_and_audits_it(
        sealed: World) -> None:
    def show(*args: str) -> tuple[int, str]:
        got = CliRunner().invoke(cli, ["call", "show", "mail-1", "--db", sealed.url, *args],
                                 catch_exceptions=False)
        return got.exit_code, got.output

    plain = show()
    shown = show("--reveal", "body", "--by", "bob", "--policy", str(sealed.policy), "--json")
    nobody = show("--reveal", "body", "--policy", str(sealed.policy))
    outside = show("--reveal", "body", "--by", "dave", "--policy", str(sealed.policy))
    never = show("--reveal", "subject", "--by", "bob", "--policy", str(sealed.policy))
    assert plain[0] == 0 and "your refund" not in plain[1]
    assert shown[0] == 0 and json.loads(shown[1])["revealed"] == {"body": BODY}
    assert nobody[0] != 0 and "--by OPERATOR" in nobody[1]
    assert outside[0] != 0 and "no rights on 'send_email'" in outside[1]
    assert never[0] != 0 and "reveal: never" in never[1]
    assert reveals(sealed) == [("operator:bob", True, "body"), ("operator:dave", False, "body"),
                               ("operator:bob", False, "subject")]


def test_reveal_rights_is_the_default_and_leaves_a_policy_hash_unchanged() -> None:
    """Approvals are bound to the policy's hash: a file that does not use the new key
    keeps the hash it had before the key existed."""
    from agent_gate.policy import Policy

    plain = POLICY.replace("{path: subject, reveal: never}", "{path: subject}")
    said = POLICY.replace("{path: subject, reveal: never}", "{path: subject, reveal: rights}")
    assert Policy.from_text(plain).hash == Policy.from_text(said).hash
    # What the hash is taken over never names the key unless it is used.
    dumped = Policy.from_text(said).document.model_dump(mode="json", by_alias=True)
    assert "reveal" not in json.dumps(dumped)
    assert Policy.from_text(POLICY).hash != Policy.from_text(plain).hash
    with pytest.raises(Exception, match="reveal"):
        Policy.from_text(POLICY.replace("reveal: never", "reveal: always"))


@pytest.mark.slow
def test_reveal_in_a_real_browser(sealed: World, served: Running, browser: Any) -> None:
    """Chromium: the call's page offers Reveal for the body only; the value shows once,
    whole and escaped (``AGENT_GATE_SCREENSHOT_DIR``: saved as inbox-reveal.png)."""
    ref, _ = sealed.shown("t1", "mail-1")
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.goto(served.base + "/login")
    page.fill("#token", sealed.tokens["bob"])
    page.click("#login")
    page.wait_for_url(served.base + "/inbox")
    with page.expect_navigation():
        page.click(f"#row-{ref} a.call-link")
    assert page.locator("button.reveal").all_text_contents() == ["Reveal body"]
    with page.expect_navigation():
        page.click("button.reveal")
    assert page.text_content("pre.revealed-value") == BODY
    if os.environ.get("AGENT_GATE_SCREENSHOT_DIR"):
        page.screenshot(path=str(Path(os.environ["AGENT_GATE_SCREENSHOT_DIR"]) /
                                 "inbox-reveal.png"), full_page=True)
    page.goto(served.base + f"/inbox/calls/{ref}")
    assert page.locator("pre.revealed-value").count() == 0
