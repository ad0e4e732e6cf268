"""The inbox's edit-then-approve form attacked (issue 31): hostile values posted to the
HTML form over real HTTP, in a logged-in session, to the real inbox. The API's ``edit``
body has its own tests (``test_edit``); this is the form's path (``editform.edit_of``).

Each refused post leaves the call as it was (same hash, no edit, no approval), is
answered 4xx, and never echoes the value it refused; markup that is accepted comes
back escaped wherever the inbox shows it.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from serve_world import Running, World, logged_in, serving

from agent_gate.ledger import Ledger
from agent_gate.serve.editform import MAX_NAME_CHARS, MAX_VALUE_CHARS

MARK = "zq-hostile-7f3a"
"""Put in each refused value: the response must not hold it."""


@pytest.fixture
def edit_server(world: World) -> Iterator[Running]:
    with serving(world, tools=True) as running:
        yield running


def edit_form(http: httpx.Client, ref: int) -> dict[str, str]:
    """The edit form's fields as the call's page renders them (hidden inputs and
    textareas), what a browser would post unchanged."""
    page = http.get(f"/inbox/calls/{ref}")
    assert page.status_code == 200, page.text
    form = re.search(r'<form method="post" class="edit"[^>]*>(.*?)</form>', page.text, re.S)
    assert form is not None, "the call's page offers no edit form"
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">',
                             form.group(1)))
    fields.update(re.findall(r'<textarea name="([^"]+)"[^>]*>([^<]*)</textarea>',
                             form.group(1)))
    return fields


def said(page: httpx.Response) -> str:
    """What the page's main part says, as a person reads it (entities decoded)."""
    main = re.search(r"<main[^>]*>(.*?)</main>", page.text, re.S)
    assert main is not None, page.text[:500]
    return html.unescape(re.sub(r"<[^>]+>", " ", main.group(1)))


def state(world: World) -> tuple[str, str, int, int]:
    """The call's state and hash, how many edits and answers it has."""
    with Ledger(world.url) as ledger:
        details = ledger.call_details("t1", "mail-1")
    assert details is not None
    c = details.call
    return c.state.value, c.args_hash, len(details.edits), len(details.approvals)


HOSTILE: list[tuple[str, dict[str, str], int, str]] = [
    ("over-long value", {"set:body": MARK + "x" * MAX_VALUE_CHARS}, 422,
     f"at most {MAX_VALUE_CHARS} characters"),
    ("over-long field name", {"set:" + "b" * (MAX_NAME_CHARS + 1): MARK}, 422,
     "names no field"),
    ("a JSON object for text", {"set:body": f'{{"x": "{MARK}"}}', "kind:body": "json"}, 422,
     "fail the schema of 'send_email'"),
    ("a number for text", {"set:subject": "12345", "kind:subject": "json"}, 422,
     "fail the schema of 'send_email'"),
    ("JSON that does not parse", {"set:body": f'{{"{MARK}', "kind:body": "json"}, 422,
     "field 'body' is not JSON"),
    ("a field not editable", {"set:to": f"eve-{MARK}@evil.example"}, 422,
     "field 'to' is not editable"),
    ("traversal: dot segments", {"set:../to": MARK}, 422, "is not editable"),
    ("traversal: through an editable field", {"set:body/../to": MARK}, 422,
     "is not editable"),
    ("traversal: a JSON pointer", {"set:/to": MARK}, 422, "is not editable"),
    ("traversal: into the object's class", {"set:body.__class__": MARK}, 422,
     "is not editable"),
    ("more fields than an edit may change",
     {f"set:f{i}": MARK for i in range(65)}, 422, "at most 64 fields"),
]


@pytest.mark.parametrize(("what", "posted", "status", "says"), HOSTILE,
                         ids=[h[0] for h in HOSTILE])
def test_a_hostile_edit_through_the_form_is_refused_and_changes_nothing(
        world: World, edit_server: Running, what: str, posted: dict[str, str], status: int,
        says: str) -> None:
    ref, _ = world.shown("t1", "mail-1")
    before = state(world)
    with logged_in(edit_server, world, "bob") as (http, _):
        form = edit_form(http, ref)
        assert form["set:body"] == "Dear Ana" and form["kind:body"] == "text"
        got = http.post(f"/inbox/calls/{ref}/approve", data={**form, **posted})
    assert got.status_code == status, (what, got.status_code, got.text[:500])
    assert says in said(got), said(got)
    assert MARK not in got.text  # the refused value is never echoed
    assert len(said(got)) < 2000
    assert state(world) == before == ("awaiting_approval", before[1], 0, 0)
    assert world.runs == []


def test_markup_in_an_edited_value_comes_back_escaped(
        world: World, edit_server: Running) -> None:
    """Markup is text a mail may hold: the edit stands, and every page that shows the
    value (the call, its edit's old version, the list's preview) escapes it."""
    markup = '<script>alert(1)</script><img src=x onerror="alert(2)">'
    ref, old_hash = world.shown("t1", "mail-1")
    with logged_in(edit_server, world, "bob") as (http, _):
        form = edit_form(http, ref)
        got = http.post(f"/inbox/calls/{ref}/approve",
                        data={**form, "set:subject": markup, "reason": markup},
                        follow_redirects=False)
        assert got.status_code == 303, got.text[:2000]
        pages = [http.get(f"/inbox/calls/{ref}"), http.get("/inbox?answered=1"),
                 http.get("/inbox/task", params={"task": "t1"}),
                 http.get("/inbox/audit"), http.get("/inbox")]
    state_now, new_hash, edits, answers = state(world)
    assert (state_now, edits, answers) == ("awaiting_approval", 1, 1) and new_hash != old_hash
    with Ledger(world.url) as ledger:
        rec = ledger.get("t1", "mail-1")
    assert rec is not None and rec.arguments is not None
    assert rec.arguments["subject"] == markup  # stored as typed: it is the mail's text
    for page in pages:
        assert page.status_code == 200, page.url
        assert "<script>alert" not in page.text and "<img src=x" not in page.text, page.url
    call_page = pages[0].text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in call_page


def _refused_without_a_change(world: World, got: httpx.Response, before: Any) -> None:
    assert got.status_code == 403, got.text[:500]
    assert MARK not in got.text
    assert state(world) == before
    assert world.runs == []


def test_an_edit_posted_without_the_csrf_token_is_refused_and_audited(
        world: World, edit_server: Running) -> None:
    ref, _ = world.shown("t1", "mail-1")
    before = state(world)
    with logged_in(edit_server, world, "bob") as (http, _):
        form = edit_form(http, ref)
        del form["csrf"]
        missing = http.post(f"/inbox/calls/{ref}/approve",
                            data={**form, "set:body": f"{MARK} no token"})
        wrong = http.post(f"/inbox/calls/{ref}/approve",
                          data={**form, "csrf": "x" * 43, "set:body": f"{MARK} forged"})
        form = edit_form(http, ref)
        elsewhere = http.post(f"/inbox/calls/{ref}/approve",
                              data={**form, "set:body": f"{MARK} other site"},
                              headers={"Origin": "https://evil.example"})
    for got in (missing, wrong, elsewhere):
        _refused_without_a_change(world, got, before)
    assert "CSRF token is missing or wrong" in missing.text and "CSRF" in wrong.text
    assert "another origin" in elsewhere.text
    refused = [e for e in world.audit() if e.event == "operator_form_approve"]
    assert [(e.actor, e.call_id, (e.detail or {}).get("reason")) for e in refused] == [
        ("operator:bob", "mail-1", "the form's CSRF token is missing or wrong"),
        ("operator:bob", "mail-1", "the form's CSRF token is missing or wrong"),
        ("operator:bob", "mail-1", "the form came from another origin")]
    assert not any(MARK in repr(e.detail) for e in world.audit())


def test_an_edit_posted_without_a_session_is_refused(
        world: World, edit_server: Running) -> None:
    ref, shown = world.shown("t1", "mail-1")
    before = state(world)
    with httpx.Client(base_url=edit_server.base, headers={"Origin": edit_server.base}) as http:
        got = http.post(f"/inbox/calls/{ref}/approve",
                        data={"args_hash": shown, "set:body": f"{MARK} anonymous",
                              "kind:body": "text"})
    _refused_without_a_change(world, got, before)
    assert "not logged in" in got.text
