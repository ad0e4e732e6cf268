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
