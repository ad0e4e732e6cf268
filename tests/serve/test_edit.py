"""Edit then approve through ``agent-gate serve``'s JSON API (issue 32): the call lists
the fields a person may edit, an approval carries the edit and the hash of what was
shown (412 otherwise), a field the policy does not mark editable is 422 naming it, and
the agent's next resume runs the edited call once, told the arguments it ran with."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from serve_world import Running, World, serving

from agent_gate.ledger import Ledger
from agent_gate.policy.edits import MAX_NAME_CHARS, MAX_VALUE_CHARS


@pytest.fixture
def edit_server(world: World) -> Iterator[Running]:
    with serving(world, tools=True) as running:
        yield running


def api(server: Running, world: World, who: str) -> httpx.Client:
    return httpx.Client(base_url=server.base,
                        headers={"Authorization": f"Bearer {world.tokens[who]}"})


def test_an_approval_with_an_edit_runs_the_edited_call_once(
        world: World, edit_server: Running) -> None:
    path, body = world.answer("t1", "mail-1")
    with api(edit_server, world, "bob") as http:
        shown = http.get(path).json()
        assert shown["editable"] == ["subject", "body"]
        got = http.post(path + "/approve", json={**body, "edit": {"body": "Dear Ana, sorry."}})
    assert got.status_code == 200, got.text
    assert got.json()["edited"] == ["body"]
    assert got.json()["args_hash"] != body["args_hash"]
    with world.gate() as gate:
        [outcome] = gate.resume("t1")
        assert outcome.state.value == "succeeded" and outcome.edited == ("body",)
        told = json.loads(outcome.tool_output())
        assert told["edited"]["arguments"]["body"] == "Dear Ana, sorry."
        assert gate.resume("t1") == []
    assert world.runs == ["send_email ana@elsewhere.org"]
    with api(edit_server, world, "bob") as http:
        after = http.get(path).json()
    assert after["edited"] == ["body"] and after["editable"] == []
    assert after["edits"][0]["by"] == "bob"
    assert after["edits"][0]["old_arguments"]["body"] == "Dear Ana"
    edits = [e for e in world.audit() if e.event == "edit"]
    assert [(e.actor, e.detail["fields"]) for e in edits] == [("operator:bob", ["body"])]


def test_a_field_not_editable_is_422_naming_it_and_nothing_changes(
        world: World, edit_server: Running) -> None:
    path, body = world.answer("t1", "mail-1")
    with api(edit_server, world, "bob") as http:
        got = http.post(path + "/approve", json={**body, "edit": {"to": "eve@evil.example"}})
    assert got.status_code == 422
    assert "'to'" in got.text and "eve@" not in got.text
    assert world.shown("t1", "mail-1")[1] == body["args_hash"]


def test_an_edit_of_arguments_not_shown_is_412(world: World, edit_server: Running) -> None:
    path, body = world.answer("t1", "mail-1")
    with api(edit_server, world, "bob") as http:
        got = http.post(path + "/approve",
                        json={**body, "args_hash": "ab" * 32, "edit": {"body": "x"}})
    assert got.status_code == 412
    with Ledger(world.url) as ledger:
        rec = ledger.get("t1", "mail-1")
    assert rec is not None and rec.edited == () and rec.args_hash == body["args_hash"]


def test_without_the_tools_nothing_is_editable_and_an_edit_is_refused(
        world: World, server: Running) -> None:
    path, body = world.answer("t1", "mail-1")
    with api(server, world, "bob") as http:
        assert http.get(path).json()["editable"] == []
        got = http.post(path + "/approve", json={**body, "edit": {"body": "x"}})
    assert got.status_code == 422 and "not registered here" in got.text


def test_an_operator_without_rights_on_the_tool_cannot_edit(
        world: World, edit_server: Running) -> None:
    path, body = world.answer("t1", "mail-1")
    with api(edit_server, world, "carol") as http:
        got = http.post(path + "/approve", json={**body, "edit": {"body": "x"}})
    assert got.status_code == 403
    assert world.shown("t1", "mail-1")[1] == body["args_hash"]


MARK = "zq-hostile-7f3a"
"""Put in each refused value: the response must not hold it."""

TOO_LONG: list[tuple[str, dict[str, object], str]] = [
    ("a text value", {"body": MARK + "x" * MAX_VALUE_CHARS},
     f"the new value of field 'body' has {MAX_VALUE_CHARS + len(MARK)} characters; "
     f"at most {MAX_VALUE_CHARS} characters"),
    ("a JSON value", {"subject": [MARK] + ["x" * 1000] * 66},
     "the new value of field 'subject' has "),
    ("a field name", {MARK + "b" * MAX_NAME_CHARS: "x"}, "names no field of this call"),
]


@pytest.mark.parametrize(("what", "edit", "says"), TOO_LONG, ids=[t[0] for t in TOO_LONG])
def test_an_edit_longer_than_the_form_allows_is_422_naming_the_field(
        world: World, edit_server: Running, what: str, edit: dict[str, object],
        says: str) -> None:
    """The HTML form's limits (``editform``) are the edit's own: the API refuses the
    same value the same way, naming the field and never echoing the value."""
    path, body = world.answer("t1", "mail-1")
    with api(edit_server, world, "bob") as http:
        got = http.post(path + "/approve", json={**body, "edit": edit})
    assert got.status_code == 422, (what, got.status_code, got.text[:300])
    assert got.json()["error"] == "EditRefused" and says in got.json()["detail"]
    assert MARK not in got.text and len(got.text) < 1000
    with Ledger(world.url) as ledger:
        details = ledger.call_details("t1", "mail-1")
    assert details is not None and details.call.args_hash == body["args_hash"]
    assert details.edits == () and details.approvals == ()


def test_an_edit_as_long_as_the_form_allows_stands(world: World, edit_server: Running) -> None:
    path, body = world.answer("t1", "mail-1")
    with api(edit_server, world, "bob") as http:
        got = http.post(path + "/approve", json={**body, "edit": {"body": "y" * MAX_VALUE_CHARS}})
    assert got.status_code == 200, got.text[:300]
    assert got.json()["edited"] == ["body"]
