"""Grants and quorum through ``agent-gate serve`` (issue 32), in a real headless Chromium
and over the JSON API: two operators in two browser sessions reach a two-person
quorum, the page showing "1 of 2" between their answers; an approver picks a grant
the policy offers, later calls within its bounds run without asking, and the grant
is revoked from the Grants page."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from serve_world import Running, World, serving

pytestmark = pytest.mark.slow

POLICY = """
version: 1
operators:
  alice: {roles: [finance]}
  carol: {roles: [finance]}
tools:
  send_email:
    effect: write
    idempotency: none
    rules:
      - id: mail-needs-a-person
        effect: approve
        approval:
          grants:
            - id: hour-in-domain
              for: 1h
              calls: 10
              when: [{arg: to, email_domain: [elsewhere.org]}]
  refund:
    effect: write
    idempotency: none
    rules:
      - id: two-for-a-refund
        effect: approve
        approval: {approvers: {min: 2, roles: [finance]}}
  charge_card:
    effect: write
    idempotency: none
    rules:
      - {id: charges, effect: allow}
"""


@pytest.fixture
def granting(world: World) -> Iterator[Running]:
    world.policy.write_text(POLICY)
    with serving(world) as running:
        yield running



def _session(browser: object, server: Running, world: World, name: str) -> object:
    """A browser context of its own (its own cookies): ``name`` logged in."""
    page = browser.new_context().new_page()  # type: ignore[attr-defined]
    page.goto(server.base + "/login")
    page.fill("#token", world.tokens[name])
    page.click("#login")
    page.wait_for_url(server.base + "/inbox")
    return page


def _approve(page: object, server: Running, ref: int, grant: str | None = None) -> None:
    page.goto(server.base + f"/inbox/calls/{ref}")  # type: ignore[attr-defined]
    if grant is not None:
        page.select_option(f"#call-{ref} select[name=grant]", grant)  # type: ignore[attr-defined]
    page.click(f"#call-{ref} button.approve")  # type: ignore[attr-defined]
    # back to the list, or the refusal's page (shown in the assertion) at the form's URL
    page.wait_for_url(re.compile(r"/inbox$|/approve$"))  # type: ignore[attr-defined]
    assert page.url == server.base + "/inbox", page.text_content("main")  # type: ignore[attr-defined]


def test_two_operators_in_two_browsers_reach_the_quorum(
        world: World, granting: Running, browser: object) -> None:
    assert world.call("tq", "refund-1", "refund", {"order": "o-7", "cents": 90000},
                      principal="zoe") == "awaiting_approval"
    ref, _ = world.shown("tq", "refund-1")
    carol = _session(browser, granting, world, "carol")
    alice = _session(browser, granting, world, "alice")

    carol.goto(granting.base + f"/inbox/calls/{ref}")  # type: ignore[attr-defined]
    assert "0 of 2" in (carol.text_content("#quorum") or "")  # type: ignore[attr-defined]
    _approve(carol, granting, ref)
    with world.gate() as gate:
        (waiting,) = gate.resume("tq")
    assert waiting.state.value == "awaiting_approval"
    assert "1 of 2 approvals" in (waiting.reason or "")

    # still in alice's list after carol's approval, "1 of 2": she opens it from there
    alice.goto(granting.base + "/inbox")  # type: ignore[attr-defined]
    assert alice.text_content(f"#row-{ref} .quorum") == "1 of 2"  # type: ignore[attr-defined]
    alice.click(f"#row-{ref} a.call-link")  # type: ignore[attr-defined]
    alice.wait_for_url(granting.base + f"/inbox/calls/{ref}")  # type: ignore[attr-defined]
    progress = alice.text_content("#quorum") or ""  # type: ignore[attr-defined]
    assert "1 of 2" in progress and "carol" in progress
    _approve(alice, granting, ref)
    assert world.runs == []
    with world.gate() as gate:
        assert [o.state.value for o in gate.resume("tq")] == ["succeeded"]
    assert world.runs == ["refund o-7"]
    (approved,) = [e for e in world.audit() if e.call_id == "refund-1" and e.event == "approve"]
    assert sorted(approved.detail["approved_by"]) == ["alice", "carol"]
    answers = {e.actor for e in world.audit()
               if e.call_id == "refund-1" and e.event == "approval_granted"}
    assert answers == {"operator:alice", "operator:carol"}


def test_a_grant_chosen_in_the_browser_covers_later_mail_until_revoked(
        world: World, granting: Running, browser: object) -> None:
    mail = {"subject": "Hi", "body": "Dear Ana"}
    assert world.call("tg", "m1", "send_email", {"to": "ana@elsewhere.org", **mail}) \
        == "awaiting_approval"
    ref, _ = world.shown("tg", "m1")
    bob = _session(browser, granting, world, "bob")
    _approve(bob, granting, ref, grant="hour-in-domain")
    assert "Grant" in (bob.text_content("#message") or "")  # type: ignore[attr-defined]
    with world.gate() as gate:
        assert [o.state.value for o in gate.resume("tg")] == ["succeeded"]
    assert world.call("tg", "m2", "send_email", {"to": "bo@elsewhere.org", **mail}) \
        == "succeeded"
    assert world.call("tg", "m3", "send_email", {"to": "eve@evil.example", **mail}) \
        == "awaiting_approval"

    bob.goto(granting.base + "/inbox/grants")  # type: ignore[attr-defined]
    row = bob.text_content("tr.grant") or ""  # type: ignore[attr-defined]
    assert "active" in row and "1 of 10" in row
    with bob.expect_navigation(url=granting.base + "/inbox/grants"):  # type: ignore[attr-defined]
        bob.click("tr.grant button.deny")  # type: ignore[attr-defined]
    assert "Revoked grant" in (bob.text_content("#note") or "")  # type: ignore[attr-defined]
    assert world.call("tg", "m4", "send_email", {"to": "cy@elsewhere.org", **mail}) \
        == "awaiting_approval"
    assert world.runs == ["send_email ana@elsewhere.org", "send_email bo@elsewhere.org"]
    revoked = [e for e in world.audit() if e.event == "grant_revoked"]
    assert [e.actor for e in revoked] == ["operator:bob"]


def test_the_api_gives_lists_and_revokes_grants_within_rights(
        world: World, granting: Running) -> None:
    world.call("ta", "m1", "send_email", {"to": "ana@elsewhere.org", "subject": "s",
                                          "body": "b"})
    path, body = world.answer("ta", "m1")

    def client(name: str) -> httpx.Client:
        return httpx.Client(base_url=granting.base,
                            headers={"Authorization": f"Bearer {world.tokens[name]}"})

    with client("bob") as bob, client("carol") as carol:
        state = bob.get(path + "/approval").json()
        assert [g["id"] for g in state["grants"]] == ["hour-in-domain"]
        refused = bob.post(path + "/approve", json={**body, "grant": "not-offered"})
        assert refused.status_code == 403 and "not offered" in refused.json()["detail"]
        done = bob.post(path + "/approve", json={**body, "grant": "hour-in-domain"})
        assert done.status_code == 200, done.text
        (given,) = done.json()["grants"]
        listed = bob.get("/api/grants", params={"active": "true"}).json()
        assert [g["grant_id"] for g in listed] == [given["grant_id"]]
        # carol may not approve send_email calls, so she may not end their grants
        no = carol.post(f"/api/grants/{given['grant_id']}/revoke", json={})
        assert no.status_code == 403
        ok = bob.post(f"/api/grants/{given['grant_id']}/revoke", json={"reason": "done"})
        assert ok.status_code == 200 and ok.json()["status"] == "revoked"
        assert bob.get("/api/grants", params={"active": "true"}).json() == []
