"""Edit then approve in a real headless Chromium (issue 32): the call's page offers a
form for the fields the policy marks editable and nothing else; the operator changes the
mail's body, approves, lands back on the list, and the agent's resume runs the edited
mail once. The call's page then shows who edited which field and the old version.

``AGENT_GATE_SCREENSHOT_EDIT=PATH`` also saves the call's page with its edit form.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from serve_world import Running, World, serving

pytestmark = pytest.mark.slow


@pytest.fixture
def edit_server(world: World) -> Iterator[Running]:
    with serving(world, tools=True) as running:
        yield running


def test_edit_the_body_in_the_browser_approve_and_it_runs_once_as_edited(
        world: World, edit_server: Running, browser: object) -> None:
    page = browser.new_page(viewport={"width": 1100, "height": 1000})  # type: ignore[attr-defined]
    page.goto(edit_server.base + "/login")
    page.fill("#token", world.tokens["bob"])
    page.click("#login")
    page.wait_for_url(edit_server.base + "/inbox")

    ref, shown_hash = world.shown("t1", "mail-1")
    card = f"#call-{ref}"
    page.goto(edit_server.base + f"/inbox/calls/{ref}")
    fields = page.eval_on_selector_all(f"{card} form.edit textarea",
                                       "els => els.map(e => e.dataset.field)")
    assert fields == ["subject", "body"]  # never `to`: the policy does not let it change
    assert page.input_value(f"{card} textarea[data-field=body]") == "Dear Ana"
    page.fill(f"{card} textarea[data-field=body]", "Dear Ana,\nyour refund is on its way.")
    page.fill(f"{card} form.edit input[name=reason]", "kinder wording")
    if os.environ.get("AGENT_GATE_SCREENSHOT_EDIT"):
        page.screenshot(path=os.environ["AGENT_GATE_SCREENSHOT_EDIT"], full_page=True)
    with page.expect_navigation(url=edit_server.base + "/inbox"):
        page.click(f"{card} button.edit-approve")
    assert "Edited (body) and approved call mail-1" in (page.text_content("#message") or "")

    assert world.runs == []
    with world.gate() as gate:
        [outcome] = gate.resume("t1")
        assert outcome.state.value == "succeeded"
        told = json.loads(outcome.tool_output())
        assert told["edited"]["fields"] == ["body"]
        assert told["edited"]["arguments"]["body"] == "Dear Ana,\nyour refund is on its way."
        assert gate.resume("t1") == []
    assert world.runs == ["send_email ana@elsewhere.org"]

    page.goto(edit_server.base + f"/inbox/calls/{ref}")
    entry = page.text_content(".edits .edit-entry") or ""
    assert "bob" in entry and "changed body" in entry and shown_hash[:16] in entry
    assert json.loads(page.text_content(".edits pre.old-arguments") or "")["body"] == "Dear Ana"
    assert page.query_selector(f"{card} form.edit") is None  # it ran: nothing to edit


def test_a_text_edit_of_a_field_posted_outside_the_form_is_refused(
        world: World, edit_server: Running, browser: object) -> None:
    """The form offers only editable fields; a hand-made field in the same session is
    refused by the server, naming the field, and the call keeps waiting unchanged."""
    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(edit_server.base + "/login")
    page.fill("#token", world.tokens["bob"])
    page.click("#login")
    page.wait_for_url(edit_server.base + "/inbox")
    ref, shown_hash = world.shown("t1", "mail-1")
    page.goto(edit_server.base + f"/inbox/calls/{ref}")
    page.eval_on_selector(
        f"#call-{ref} form.edit fieldset",
        "f => { const t = document.createElement('textarea'); t.name = 'set:to';"
        " t.value = 'eve@evil.example'; f.appendChild(t); }")
    with page.expect_response(edit_server.base + f"/inbox/calls/{ref}/approve") as answer:
        page.click(f"#call-{ref} button.edit-approve")
    assert answer.value.status == 422
    text = page.text_content("body") or ""
    assert "field 'to' is not editable" in text and "eve@" not in text
    assert world.shown("t1", "mail-1")[1] == shown_hash
