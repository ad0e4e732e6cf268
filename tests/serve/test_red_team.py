"""The operator console attacked: hostile ids, races, stale pages, dead credentials,
forged forms, framing and numbers JSON does not have. Real server, real HTTP.

Forms are submitted as a browser submits them: the card's own ``action`` (or the
button's ``formaction``) resolved against the page, dot segments (``..``, and
``%2e%2e``, which browsers read the same) removed before the request is sent.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx
import pytest
from serve_world import Running, World, logged_in, serving

from agent_gate.ledger import Ledger
from agent_gate.ledger.views.operators import Operators
from agent_gate.serve.headers import SECURITY_HEADERS

VICTIM = "victim"
"""The call beside the hostile one, in the same task: a large refund nobody approved."""

HOSTILE_CALL_IDS = [
    f"../t9/{VICTIM}",
    f"%2e%2e/t9/{VICTIM}",
    f"..%2Ft9%2F{VICTIM}",
    f"./{VICTIM}/../../t9/{VICTIM}",
    "mail?task=t9#frag",
    "ünï/cödé ✉ 📧",
    "\u202etxt.exe",  # RTL override
    "tab\tbell\x07del\x7f",
    "x" * 255,
]


class Forms(HTMLParser):
    """Each call card of a page: its call id, its forms (action, fields, buttons with
    a formaction), and its links."""

    def __init__(self) -> None:
        super().__init__()
        self.cards: list[dict[str, Any]] = []
        self._card: dict[str, Any] | None = None
        self._form: dict[str, Any] | None = None
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "div" and "call" in a.get("class", "").split():
            self._card = {"id": a.get("data-call-id") or a.get("id", "")[len("call-"):],
                          "forms": [], "links": []}
            self.cards.append(self._card)
            self._depth = 0
        if self._card is None:
            return
        if tag == "div":
            self._depth += 1
        elif tag == "a":
            self._card["links"].append(a.get("href", ""))
        elif tag == "form":
            self._form = {"action": a.get("action", ""), "fields": {}, "buttons": {}}
            self._card["forms"].append(self._form)
        elif tag == "input" and self._form is not None and a.get("name"):
            self._form["fields"][a["name"]] = a.get("value", "")
        elif tag == "button" and self._form is not None:
            self._form["buttons"][a.get("class", "submit")] = a.get("formaction") or \
                self._form["action"]

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None
        if tag == "div" and self._card is not None:
            self._depth -= 1
            if self._depth == 0:
                self._card = None


def cards(html: str) -> dict[str, dict[str, Any]]:
    parser = Forms()
    parser.feed(html)
    return {c["id"]: c for c in parser.cards}


class Rows(HTMLParser):
    """The list's rows: each row's call id (as text) and the link that opens it."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, str] = {}
        self._link: str | None = None
        self._in_id = False
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "a" and "call-link" in a.get("class", "").split():
            self._link = a.get("href", "")
        elif tag == "td" and "call-id" in a.get("class", "").split():
            self._in_id, self._text = True, ""

    def handle_data(self, data: str) -> None:
        if self._in_id:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._in_id:
            self._in_id = False
            assert self._link is not None
            self.rows[self._text] = self._link


def opened(http: httpx.Client, base: str, call_id: str) -> tuple[str, dict[str, Any]]:
    """The call's page as a person reaches it (its row's link in the list, resolved as
    a browser resolves it) and the call's card on that page."""
    listing = base + "/inbox"
    parser = Rows()
    parser.feed(http.get(listing).text)
    page = as_a_browser(listing, parser.rows[call_id])
    return page, cards(http.get(page).text)[call_id]


def as_a_browser(page: str, href: str) -> str:
    """``href`` resolved against ``page`` as a browser does, ``%2e`` dots included."""
    joined = urlsplit(urljoin(page, href))
    out: list[str] = []
    for seg in joined.path.split("/"):
        low = seg.lower()
        if low in ("..", ".%2e", "%2e.", "%2e%2e"):
            if len(out) > 1:
                out.pop()
        elif low not in (".", "%2e"):
            out.append(seg)
    return urlunsplit(joined._replace(path="/".join(out)))


def submit(http: httpx.Client, page: str, form: dict[str, Any], button: str,
           **fields: str) -> httpx.Response:
    target = as_a_browser(page, form["buttons"][button])
    return http.post(target, data={**form["fields"], **fields}, follow_redirects=True)


def together(*steps: Callable[[], Any]) -> list[Any]:
    """Run ``steps`` in threads released at the same instant; their results, in order."""
    barrier = threading.Barrier(len(steps))
    results: list[Any] = [None] * len(steps)

    def run(i: int) -> None:
        barrier.wait(timeout=30)
        results[i] = steps[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(steps))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    return results


def approvals_of(world: World, task: str, call_id: str) -> list[str]:
    with Ledger(world.url) as ledger:
        rec = ledger.get(task, call_id)
        details = ledger.call_details(task, call_id)
    assert rec is not None and details is not None
    return [a.decided_by for a in details.approvals]


@pytest.mark.parametrize("hostile", HOSTILE_CALL_IDS, ids=lambda s: repr(s)[:24])
def test_the_card_of_a_hostile_call_id_answers_that_call(
        world: World, server: Running, hostile: str) -> None:
    assert world.call("t9", VICTIM, "refund", {"order": "o-1", "cents": 9_999_900},
                      principal="zoe") == "awaiting_approval"
    assert world.call("t9", hostile, "send_email",
                      {"to": "a@b.org", "subject": "hi", "body": "harmless"},
                      principal="zoe") == "awaiting_approval"
    with logged_in(server, world, "alice") as (http, _):
        page, card = opened(http, server.base, hostile)
        got = submit(http, page, card["forms"][0], "approve", reason="the harmless mail")
        task_links = [h for h in card["links"] if "task" in h]
        task_page = http.get(as_a_browser(page, task_links[0]))
    assert got.status_code == 200, got.text
    assert approvals_of(world, "t9", hostile) == ["alice"]
    assert approvals_of(world, "t9", VICTIM) == []  # the refund beside it: untouched
    assert task_page.status_code == 200 and "<h1>Task <span class=\"mono\">t9</span>" \
        in task_page.text
    with world.gate() as gate:
        ran = {o.call_id: o.state.value for o in gate.resume("t9")}
    assert ran == {hostile: "succeeded", VICTIM: "awaiting_approval"}
    assert world.runs == ["send_email a@b.org"]


@pytest.mark.parametrize("task", ["../inbox/audit", "..", "%2e%2e", "t?call=x#top",
                                  "ünï\u202e", "a/b/../../c", "y" * 255])
def test_a_hostile_task_id_links_to_its_own_task(
        world: World, server: Running, task: str) -> None:
    assert world.call(task, "m", "send_email", {"to": "a@b.org", "subject": "s", "body": "b"},
                      principal="zoe") == "awaiting_approval"
    with logged_in(server, world, "bob") as (http, _):
        ref, _ = world.shown(task, "m")
        page, card = opened(http, server.base, "m")
        (link,) = [h for h in card["links"] if "task" in h]
        got = http.get(as_a_browser(page, link))
        listed = http.get("/inbox/tasks")
        (next_page,) = re.findall(r'href="(/inbox/task\?task=[^"]*)"', listed.text)[:1] or [""]
        answered = submit(http, page, card["forms"][0], "deny")
    assert got.status_code == 200
    assert f'href="/inbox/calls/{ref}"' in got.text  # that task's page, listing its call
    assert next_page == link
    assert answered.status_code == 200 and "Denied call m" in answered.text


def test_an_unknown_hostile_tool_name_is_shown_as_text(world: World, server: Running) -> None:
    name = '"><script>alert(1)</script>../../inbox'
    assert world.call("t8", "c1", name, {}, principal="zoe") == "rejected"
    with logged_in(server, world, "bob") as (http, _):
        got = http.get("/inbox/task", params={"task": "t8"})
    assert got.status_code == 200
    # The page's own script, once (allowed by its hash); the tool's name only as text.
    assert got.text.count("<script") == 1 and "&lt;script&gt;" in got.text


def test_two_operators_racing_to_answer_one_call(world: World, server: Running) -> None:
    assert world.call("t5", "m5", "send_email", {"to": "a@b.org", "subject": "s", "body": "b"},
                      principal="zoe") == "awaiting_approval"
    path, body = world.answer("t5", "m5")

    def answer(name: str, verb: str) -> int:
        with httpx.Client(base_url=server.base,
                          headers={"Authorization": f"Bearer {world.tokens[name]}"}) as http:
            return http.post(f"{path}/{verb}", json=body).status_code

    approve, deny = together(lambda: answer("bob", "approve"), lambda: answer("alice", "deny"))
    # Deny first: the approval finds nothing waiting (409). Approve first: the approval
    # stands unused and the denial still rejects the call.
    assert (approve, deny) in {(200, 200), (409, 200)}
    with world.gate() as gate:
        assert [o.state.value for o in gate.resume("t5")] in ([], ["rejected"])
        assert gate.ledger.get("t5", "m5").state.value == "rejected"  # type: ignore[union-attr]
        assert gate.ledger.verify_audit().ok
    assert world.runs == []


def test_a_denial_racing_a_resume_never_runs_twice_nor_after_a_no(
        world: World, server: Running) -> None:
    path, body = world.answer("t1", "mail-1")
    bob = {"Authorization": f"Bearer {world.tokens['bob']}"}
    assert httpx.post(f"{server.base}{path}/approve", json=body, headers=bob).status_code == 200

    def resume() -> list[str]:
        with world.gate() as gate:
            return [o.state.value for o in gate.resume("t1")]

    def deny() -> int:
        return httpx.post(f"{server.base}{path}/deny", json=body, headers=bob).status_code

    resumed, denied = together(resume, deny)
    with Ledger(world.url) as ledger:
        state = ledger.get("t1", "mail-1").state.value  # type: ignore[union-attr]
    if denied == 200:
        assert state == "rejected" and world.runs == []
    else:
        assert denied == 409 and state == "succeeded" and resumed == ["succeeded"]
        assert world.runs == ["send_email ana@elsewhere.org"]


def test_a_stale_page_is_not_answered_after_the_arguments_changed(
        world: World, server: Running) -> None:
    with logged_in(server, world, "bob") as (http, _):
        page, card = opened(http, server.base, "mail-1")
        with Ledger(world.url) as ledger, ledger.engine.begin() as conn:
            from sqlalchemy import text

            conn.execute(text("UPDATE tool_calls SET arguments = :a, args_hash = :h "
                              "WHERE call_id = 'mail-1'"),
                         {"a": '{"body":"x","subject":"y","to":"mallory@evil.example"}',
                          "h": "e" * 64})
        got = submit(http, page, card["forms"][0], "approve")
        denied = submit(http, page, card["forms"][0], "deny")
    assert (got.status_code, denied.status_code) == (412, 412)
    assert "read the call again" in got.text
    assert approvals_of(world, "t1", "mail-1") == []
    refused = [e for e in world.audit() if e.event == "answer_refused"]
    assert [(e.actor, e.detail["answer"], e.detail["actual_args_hash"]) for e in refused] == [
        ("operator:bob", "approve", "e" * 64), ("operator:bob", "deny", "e" * 64)]
    assert "mallory" not in str([e.detail for e in refused])


def test_the_hash_of_another_call_does_not_answer_this_one(
        world: World, server: Running) -> None:
    world.call("t1", "mail-2", "send_email", {"to": "zed@b.org", "subject": "s", "body": "b"})
    path, _ = world.answer("t1", "mail-1")
    _, other = world.answer("t1", "mail-2")
    got = httpx.post(f"{server.base}{path}/approve", json=other,
                     headers={"Authorization": f"Bearer {world.tokens['bob']}"})
    assert got.status_code == 412 and got.json()["error"] == "AnswerMismatch"
    assert approvals_of(world, "t1", "mail-1") == []


def test_old_clients_naming_the_call_id_without_a_hash_change_nothing(
        world: World, server: Running) -> None:
    bob = {"Authorization": f"Bearer {world.tokens['bob']}"}
    with httpx.Client(base_url=server.base, headers=bob) as http:
        by_name = http.post("/api/calls/mail-1/approve", json={"task": "t1"})
        ref, _ = world.shown("t1", "mail-1")
        no_hash = http.post(f"/api/calls/{ref}/approve", json={"reason": "ok"})
    assert (by_name.status_code, no_hash.status_code) == (422, 422)
    assert any(e["loc"][-1] == "args_hash" for e in no_hash.json()["detail"])
    assert approvals_of(world, "t1", "mail-1") == []


def test_a_removed_or_replaced_operator_loses_every_session_and_token(
        world: World, server: Running) -> None:
    with logged_in(server, world, "bob") as (http, _):
        assert http.get("/inbox").status_code == 200
        with Ledger(world.url) as ledger:
            ops = Operators(ledger.engine)
            assert ops.remove("bob")
            _, new_token = ops.add("bob", approve=["send_email"])
        stale_cookie = http.get("/inbox")
        path, body = world.answer("t1", "mail-1")
        stale_token = http.post(f"{path}/approve", json=body,
                                headers={"Authorization": f"Bearer {world.tokens['bob']}"})
        fresh_token = http.get("/api/approvals",
                               headers={"Authorization": f"Bearer {new_token}"})
    assert stale_cookie.status_code == 303 and stale_cookie.headers["location"] == "/login"
    assert stale_token.status_code == 401 and fresh_token.status_code == 200
    assert approvals_of(world, "t1", "mail-1") == []


def test_a_csrf_token_of_another_session_is_refused(world: World, server: Running) -> None:
    ref, shown = world.shown("t1", "mail-1")
    with logged_in(server, world, "alice") as (_, alices), \
            logged_in(server, world, "bob") as (bobs_browser, _):
        got = bobs_browser.post(f"/inbox/calls/{ref}/approve",
                                data={"csrf": alices, "args_hash": shown})
    assert got.status_code == 403
    assert approvals_of(world, "t1", "mail-1") == []


def test_every_response_forbids_framing_sniffing_and_third_party_script(
        world: World, server: Running) -> None:
    bob = {"Authorization": f"Bearer {world.tokens['bob']}"}
    with httpx.Client(base_url=server.base) as http:
        got = [http.get("/login"), http.get("/inbox"), http.get("/health"),
               http.get("/api/approvals"), http.get("/api/approvals", headers=bob),
               http.get("/openapi.json", headers=bob), http.get("/nowhere"),
               http.post("/api/calls/1/approve", headers=bob, json={})]
        docs = [http.get(p, headers=bob).status_code for p in ("/docs", "/redoc")]
    for response in got:
        for name, value in SECURITY_HEADERS.items():
            assert response.headers.get(name) == value, (response.url, name)
    csp = SECURITY_HEADERS["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp
    (scripts,) = [d.strip() for d in csp.split(";") if d.strip().startswith("script-src")]
    assert re.fullmatch(r"script-src 'sha256-[A-Za-z0-9+/]+=*'", scripts)  # one hash, no more
    assert "default-src 'none'" in csp
    assert SECURITY_HEADERS["X-Frame-Options"] == "DENY"
    assert docs == [404, 404]


@pytest.mark.parametrize("raw", [
    b'{"args_hash": "%s", "expires_in": NaN}',
    b'{"args_hash": "%s", "expires_in": -Infinity}',
    b'{"args_hash": "%s", "extra": Infinity}',
])
def test_numbers_json_does_not_have_are_a_422(world: World, server: Running,
                                              raw: bytes) -> None:
    path, body = world.answer("t1", "mail-1")
    got = httpx.post(f"{server.base}{path}/approve", content=raw % body["args_hash"].encode(),
                     headers={"Authorization": f"Bearer {world.tokens['bob']}",
                              "Content-Type": "application/json"})
    assert got.status_code == 422, got.text
    assert approvals_of(world, "t1", "mail-1") == []


def test_a_nan_result_for_a_call_in_doubt_is_a_422(world: World, server: Running) -> None:
    assert world.call("t2", "charge-1", "charge_card", {"order": "o-7"}) == "in_doubt"
    path, body = world.answer("t2", "charge-1")
    got = httpx.post(f"{server.base}{path}/resolve",
                     content=b'{"args_hash": "%s", "as": "succeeded", "result": {"n": NaN}}'
                     % body["args_hash"].encode(),
                     headers={"Authorization": f"Bearer {world.tokens['carol']}",
                              "Content-Type": "application/json"})
    assert got.status_code == 422
    with Ledger(world.url) as ledger:
        assert ledger.get("t2", "charge-1").state.value == "in_doubt"  # type: ignore[union-attr]


def test_without_a_policy_file_the_same_holds(world: World) -> None:
    with serving(world, policy=False) as server:
        path, body = world.answer("t1", "mail-1")
        got = httpx.post(f"{server.base}{path}/approve", json={**body, "args_hash": "0" * 64},
                         headers={"Authorization": f"Bearer {world.tokens['bob']}"})
    assert got.status_code == 412
