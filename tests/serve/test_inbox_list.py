"""The inbox's list over real HTTP: keyset pages, filters, counts, the ETag the page
polls with, bulk answers bound row by row, and an answer that returns to the list.

Calls are recorded by the agent's own gate on the same ledger (SQLite, and PostgreSQL
when configured), the server is the real application under uvicorn on loopback.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from serve_world import Running, World, call_ids, listed_total, logged_in
from sqlalchemy import text

from agent_gate import Principal
from agent_gate.ledger import Ledger


def record(world: World, calls: list[tuple[str, str, str, dict[str, Any]]]) -> None:
    """Hand many calls to one agent gate (task, call id, tool, arguments)."""
    with world.gate() as gate:
        for task, call_id, name, arguments in calls:
            out = gate.execute(task, {"call_id": call_id, "name": name, "arguments": arguments},
                               principal=Principal(id="zoe"))
            assert out.state.value == "awaiting_approval", out


def mails(n: int, task: str = "bulk", start: int = 0) -> list[tuple[str, str, str, dict[str, Any]]]:
    return [(task, f"m-{i:03d}", "send_email",
             {"to": f"u{i}@example.org", "subject": "s", "body": "b"})
            for i in range(start, start + n)]


def refs(html: str) -> list[int]:
    """The rows of a list page, in order, by ``ref``."""
    return [int(r) for r in re.findall(r'<tr class="row [a-z_]+" id="row-(\d+)"', html)]


def link(html: str, anchor: str) -> str | None:
    m = re.search(rf'<a id="{anchor}" href="([^"]+)"', html)
    return m.group(1).replace("&amp;", "&") if m else None


def picks(html: str) -> dict[int, str]:
    """Each row's bulk checkbox value (``ref:args_hash``), by ref."""
    return {int(v.split(":")[0]): v for v in re.findall(r'name="pick" value="([^"]+)"', html)}


def test_the_list_is_keyset_paged_oldest_first_and_an_answer_moves_nothing(
        world: World, server: Running) -> None:
    record(world, mails(30, "a") + mails(30, "b"))
    with Ledger(world.url) as ledger:
        expected = sorted(r.row_id for t in ("t1", "a", "b") for r in ledger.calls(t))
    with logged_in(server, world, "alice") as (http, _):
        first = http.get("/inbox", params={"limit": "25"}).text
        seen, pages, url = refs(first), [first], link(first, "next-page")
        while url:
            pages.append(http.get(url).text)
            seen += refs(pages[-1])
            url = link(pages[-1], "next-page")
        assert seen == expected and len(seen) == 61  # every call once, oldest first
        assert [len(refs(p)) for p in pages] == [25, 25, 11]
        assert link(pages[0], "prev") is None
        second = http.get(link(first, "next-page") or "").text
        back = http.get(link(second, "prev") or "").text
        assert refs(back) == refs(first)
        # Answering a call of page 1 moves nobody on page 2: its cursor is a ref.
        ref, shown = refs(first)[3], picks(first)[refs(first)[3]].split(":")[1]
        got = http.post(f"/api/calls/{ref}/deny", json={"args_hash": shown},
                        headers={"Authorization": f"Bearer {world.tokens['alice']}"})
        assert got.status_code == 200
        assert refs(http.get(link(first, "next-page") or "").text) == refs(second)
        newest = refs(http.get("/inbox", params={"sort": "newest", "limit": "25"}).text)
    assert newest == sorted(set(expected) - {ref}, reverse=True)[:25]


def test_filters_search_and_counts_by_tool_and_rule(world: World, server: Running) -> None:
    record(world, [*mails(3, "shop-1"),
                   ("shop-2", "r-1", "refund", {"order": "o-1", "cents": 100}),
                   ("shop-2", "r-2", "refund", {"order": "o-2", "cents": 200})])
    with Ledger(world.url) as ledger, ledger.engine.begin() as conn:
        conn.execute(text("UPDATE tool_calls SET updated_at = :t WHERE call_id = 'r-1'"),
                     {"t": datetime.now(UTC) - timedelta(hours=2)})
    with logged_in(server, world, "alice") as (http, _):
        def rows(**params: str) -> list[str]:
            return call_ids(http.get("/inbox", params=params).text)

        assert rows(tool="refund") == ["r-1", "r-2"]
        assert rows(task="shop-1") == ["m-000", "m-001", "m-002"]
        assert rows(rule="refunds-need-a-person") == ["r-1", "r-2"]
        assert rows(q="r-") == ["r-1", "r-2"]  # a call id's beginning
        assert rows(q="shop-2") == ["r-1", "r-2"]  # a task id's beginning
        assert rows(age="1h") == ["r-1"]
        page = http.get("/inbox").text
    counts = re.search(r'<div id="counts".*?</div>', page, re.S)
    assert counts is not None
    found = dict(re.findall(r'class="facet [a-z ]+" href="[^"]*">([^<]+?) <b>(\d+)</b>',
                            counts.group(0)))
    assert found == {"send_email": "4", "refund": "2", "mail-needs-a-person": "4",
                     "refunds-need-a-person": "2"}
    assert '<b id="total">6</b>' in counts.group(0)
    with logged_in(server, world, "carol") as (http, _):  # carol approves refunds only
        mine = call_ids(http.get("/inbox", params={"mine": "1"}).text)
        everything = http.get("/inbox").text
    assert mine == ["r-1", "r-2"]
    assert set(picks(everything)) == {r for r in refs(everything) if r in
                                      {world.shown("shop-2", c)[0] for c in ("r-1", "r-2")}}


def test_only_mine_lists_each_state_by_its_own_right(world: World, server: Running) -> None:
    """With both states shown, "only mine" keeps the calls awaiting approval of the
    operator's ``approve`` tools and the calls in doubt of their ``resolve`` tools, in
    the rows and the counts (page and API): carol approves refunds and resolves every
    tool, alice approves every tool and resolves none. One list of both rights' tools
    for both states (a ``*`` in either: every tool) listed the mail to both."""
    record(world, [("shop", "r-1", "refund", {"order": "o-1", "cents": 100})])
    assert world.call("t2", "charge-1", "charge_card", {"order": "o-7"}) == "in_doubt"
    mine = {"mine": "1", "state": "all"}
    seen: dict[str, Any] = {}
    with httpx.Client(base_url=server.base) as api:
        for name in ("carol", "alice", "bob"):
            with logged_in(server, world, name) as (http, _):
                seen[name] = http.get("/inbox", params=mine).text
            seen[f"api {name}"] = api.get("/api/inbox", params=mine, headers={
                "Authorization": f"Bearer {world.tokens[name]}"}).json()
    expected = {"carol": (["r-1", "charge-1"], {"refund": 1, "charge_card": 1}),
                "alice": (["mail-1", "r-1"], {"send_email": 1, "refund": 1}),
                "bob": (["mail-1"], {"send_email": 1})}
    for name, (calls, by_tool) in expected.items():
        assert call_ids(seen[name]) == calls, name
        assert listed_total(seen[name]) == len(calls), name
        api_rows = seen[f"api {name}"]
        assert [r["call_id"] for r in api_rows["rows"]] == calls, name
        assert api_rows["counts"]["total"] == len(calls), name
        assert api_rows["counts"]["by_tool"] == by_tool, name


def test_the_rows_poll_answers_304_until_something_changes(
        world: World, server: Running) -> None:
    with logged_in(server, world, "bob") as (http, _):
        first = http.get("/inbox/rows")
        tag = first.headers["etag"]
        same = http.get("/inbox/rows", headers={"If-None-Match": tag})
        record(world, mails(1, "late"))
        changed = http.get("/inbox/rows", headers={"If-None-Match": tag})
    assert first.status_code == 200 and same.status_code == 304 and same.content == b""
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    assert "m-000" in changed.text and "m-000" not in first.text
    assert first.headers["cache-control"] == "no-store"


def test_bulk_answers_each_row_bound_to_its_hash_and_one_refusal_blocks_none(
        world: World, server: Running) -> None:
    record(world, [*mails(4, "b1"), ("b1", "r-1", "refund", {"order": "o", "cents": 5})])
    with logged_in(server, world, "bob") as (http, csrf):  # bob approves mail only
        page = http.get("/inbox", params={"task": "b1"}).text
        boxes = picks(page)
        ok1, ok2, changed, forged = (world.shown("b1", f"m-{i:03d}")[0] for i in range(4))
        refund, refund_hash = world.shown("b1", "r-1")
        assert refund not in boxes  # no box for a tool outside bob's rights
        # The arguments of one row change after the page was read.
        with Ledger(world.url) as ledger, ledger.engine.begin() as conn:
            conn.execute(text("UPDATE tool_calls SET args_hash = :h WHERE id = :r"),
                         {"h": "e" * 64, "r": changed})
        # A row's value edited in the form: the call of one row, the hash of another.
        swapped = f"{forged}:{boxes[ok1].split(':')[1]}"
        sent = [boxes[ok1], boxes[ok2], boxes[changed], swapped, f"{refund}:{refund_hash}",
                "7:zz"]
        got = http.post("/inbox/bulk", data={
            "csrf": csrf, "action": "approve", "pick": sent, "reason": "checked",
            "back": "task=b1&limit=25"}, follow_redirects=False)
        listed = http.get(got.headers["location"])
    assert got.status_code == 303 and got.headers["location"] == "/inbox?task=b1&limit=25"
    results = dict(re.findall(r'<tr class="result (done|refused)" data-ref="(\d+)"',
                              listed.text)[i][::-1] for i in range(5))
    assert results == {str(ok1): "done", str(ok2): "done", str(changed): "refused",
                       str(forged): "refused", str(refund): "refused"}
    assert "refused (412)" in listed.text and "refused (403)" in listed.text
    assert "Approved 2 of 6; 1 row(s) named no call and hash (ignored)." in listed.text
    with Ledger(world.url) as ledger:
        approved = {a.call_id for d in (ledger.call_details("b1", c) for c in
                                        ("m-000", "m-001", "m-002", "m-003", "r-1"))
                    if d is not None for a in d.approvals}
    assert approved == {"m-000", "m-001"}
    refusals = [e for e in world.audit() if e.event in ("answer_refused", "operator_approve")]
    assert {(e.call_id, e.event) for e in refusals} >= {
        ("m-002", "answer_refused"), ("m-003", "answer_refused"), ("r-1", "operator_approve")}


def test_a_single_answer_returns_to_the_list_where_the_person_was(
        world: World, server: Running) -> None:
    record(world, mails(3, "p"))
    with logged_in(server, world, "bob") as (http, csrf):
        listing = http.get("/inbox", params={"task": "p", "sort": "newest"}).text
        first = refs(listing)[0]
        opened = re.search(rf'href="(/inbox/calls/{first}[^"]*)"', listing)
        assert opened is not None
        call = http.get(opened.group(1).replace("&amp;", "&")).text
        back = re.search(r'name="back" value="([^"]*)"', call)
        nxt = link(call, "next")
        assert back is not None and nxt is not None
        shown = re.search(r'name="args_hash" value="([0-9a-f]{64})"', call)
        assert shown is not None
        got = http.post(f"/inbox/calls/{first}/deny", data={
            "csrf": csrf, "args_hash": shown.group(1), "back": back.group(1).replace("&amp;", "&")})
        landed = http.get(got.headers["location"])
    assert got.status_code == 303 and got.headers["location"] == "/inbox?task=p&sort=newest"
    assert nxt.startswith(f"/inbox/calls/{refs(listing)[1]}?")  # next in the list's order
    assert "Denied call m-002" in landed.text and first not in refs(landed.text)


def test_hostile_filters_and_back_fields_stay_text(world: World, server: Running) -> None:
    hostile = ["' OR 1=1 --", "%", "_", "\\", '"><script>alert(1)</script>',
               "x' UNION SELECT token_hash FROM operators --", "../../audit", "ünï\u202e"]
    with logged_in(server, world, "bob") as (http, csrf):
        for value in hostile:
            for name in ("q", "tool", "task", "rule"):
                got = http.get("/inbox", params={name: value})
                assert got.status_code == 200, (name, value)
                assert refs(got.text) == [], (name, value)  # matches nothing, leaks nothing
                assert "<script>alert" not in got.text
        outs = []
        for back in ("//evil.example/x", "https://evil.example/inbox?q=1",
                     "/inbox?tool=%22%3E%3Cscript%3E", "\r\nLocation: https://evil.example"):
            got = http.post("/inbox/bulk", data={"csrf": csrf, "action": "deny",
                                                 "pick": "999999:" + "0" * 64, "back": back})
            outs.append(got.headers["location"])
    assert all(o.startswith("/inbox") and "evil" not in o and "\n" not in o for o in outs)
    assert outs[2] == "/inbox?tool=%22%3E%3Cscript%3E"  # kept as a value, encoded


def test_a_forged_bulk_form_is_refused_and_audited(world: World, server: Running) -> None:
    ref, shown = world.shown("t1", "mail-1")
    form = {"action": "approve", "pick": f"{ref}:{shown}"}
    with logged_in(server, world, "bob") as (http, csrf):
        missing = http.post("/inbox/bulk", data=form)
        wrong = http.post("/inbox/bulk", data={**form, "csrf": "guess"})
        elsewhere = http.post("/inbox/bulk", data={**form, "csrf": csrf},
                              headers={"Origin": "http://evil.example"})
    anonymous = httpx.post(f"{server.base}/inbox/bulk", data={**form, "csrf": csrf})
    assert [r.status_code for r in (missing, wrong, elsewhere, anonymous)] == [403] * 4
    refused = [e for e in world.audit() if e.event == "operator_form_bulk_approve"]
    assert [e.detail["allowed"] for e in refused] == [False] * 4
    assert [e.actor for e in refused] == ["operator:bob"] * 3 + ["anonymous"]
    with Ledger(world.url) as ledger:
        details = ledger.call_details("t1", "mail-1")
    assert details is not None and details.approvals == ()


def test_an_approved_call_leaves_the_list_until_asked_for(
        world: World, server: Running) -> None:
    """Approved, the call stays ``awaiting_approval`` until a gate runs it; nobody needs
    to answer it again, so the list leaves it out (``answered=1`` shows it)."""
    path, body = world.answer("t1", "mail-1")
    with logged_in(server, world, "bob") as (http, _):
        before = refs(http.get("/inbox").text)
        got = http.post(f"{path}/approve", json=body,
                        headers={"Authorization": f"Bearer {world.tokens['bob']}"})
        after = refs(http.get("/inbox").text)
        answered = refs(http.get("/inbox", params={"answered": "1"}).text)
    ref, _ = world.shown("t1", "mail-1")
    assert got.status_code == 200
    assert (before, after, answered) == ([ref], [], [ref])
    with Ledger(world.url) as ledger:
        assert ledger.get("t1", "mail-1").state.value == "awaiting_approval"  # type: ignore[union-attr]


def test_refs_past_the_largest_row_id_name_nothing(world: World, server: Running) -> None:
    """Row ids are 32-bit on PostgreSQL: a larger one in a cursor, a path, a bulk row or
    an audit cursor is no call (or no entry), never a database error."""
    bob = {"Authorization": f"Bearer {world.tokens['bob']}"}
    with logged_in(server, world, "bob") as (http, csrf):
        pages = [http.get("/inbox", params={name: str(2**31)}).status_code
                 for name in ("after", "before")]
        bulk = http.post("/inbox/bulk", data={"csrf": csrf, "action": "deny",
                                              "pick": f"{2**31}:{'0' * 64}"},
                         follow_redirects=True)
    api = [httpx.get(f"{server.base}{path}", headers=bob).status_code
           for path in (f"/api/calls/{2**31}", f"/api/audit?after={2**31}")]
    assert pages == [200, 200] and api == [422, 200]
    assert bulk.status_code == 200 and "named no call and hash" in bulk.text


def test_the_api_lists_the_same_pages_as_json(world: World, server: Running) -> None:
    record(world, mails(3, "api"))
    bob = {"Authorization": f"Bearer {world.tokens['bob']}"}
    first = httpx.get(f"{server.base}/api/inbox", params={"limit": "25"}, headers=bob).json()
    tool = httpx.get(f"{server.base}/api/inbox", params={"task": "api", "sort": "newest"},
                     headers=bob).json()
    assert [r["call_id"] for r in first["rows"]] == ["mail-1", "m-000", "m-001", "m-002"]
    assert first["counts"] == {"total": 4, "by_tool": {"send_email": 4},
                               "by_rule": {"mail-needs-a-person": 4}}
    assert first["next"] is None and first["rows"][0]["args_hash"] == world.shown("t1",
                                                                                   "mail-1")[1]
    assert [r["call_id"] for r in tool["rows"]] == ["m-002", "m-001", "m-000"]
    assert httpx.get(f"{server.base}/api/inbox").status_code == 401


def test_what_answers_did_is_kept_for_the_list_at_most_twenty_deep(
        world: World, server: Running) -> None:
    with logged_in(server, world, "bob") as (http, csrf):
        for i in range(25):
            got = http.post("/inbox/bulk", data={"csrf": csrf, "action": "deny",
                                                 "pick": f"{900000 + i}:{'0' * 64}"})
            assert got.status_code == 303
        shown = http.get("/inbox").text.count('<p class="note"')
        again = http.get("/inbox").text.count('<p class="note"')
    assert (shown, again) == (20, 0)  # shown once, the newest twenty
