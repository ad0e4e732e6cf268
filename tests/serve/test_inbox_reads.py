"""What the inbox's reads cost, in statements: a page of calls with their whole details
(``/api/approvals``, ``/api/in-doubt``) costs four statements whatever the page
holds (not three per call), and a fifth for their edits however many were edited;
the list's "1 of 2" of quorum calls costs two statements however many rows show it;
the list's poll that finds nothing new costs one aggregate over the calls, no page
read, before its 304.

Statements are counted as the database driver is handed them (SQLAlchemy's
``before_cursor_execute`` on every engine of the process: the server runs in a thread
of it), only those that read the calls, their trail, their answers or their edits.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from serve_world import World, logged_in, serving
from sqlalchemy import Engine, event

from agent_gate import Principal
from agent_gate.serve.webhooks import ServeConfig

QUIET = ServeConfig(checkpoint_every=None, sweep_every=None)
"""No checkpoint and no deadline sweep on the server's timers: a sweeper's pass that
fell inside a counted request was counted with it (its read of the deadlines)."""
_TABLES = re.compile(
    r"\b(tool_calls|audit_events|approvals|approval_deadlines|approval_edits)\b")


@contextmanager
def counting() -> Iterator[list[str]]:
    """The statements that read calls, trails, answers, deadlines or edits while the
    block runs."""
    seen: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if _TABLES.search(statement):
            seen.append(statement)

    event.listen(Engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", before)


def waiting(world: World, n: int, task: str = "many") -> None:
    with world.gate() as gate:
        for i in range(n):
            out = gate.execute(task, {"call_id": f"m-{i:03d}", "name": "send_email",
                                      "arguments": {"to": f"u{i}@example.org",
                                                    "subject": "s", "body": "b"}},
                               principal=Principal(id="zoe"))
            assert out.state.value == "awaiting_approval"


def bearer(world: World) -> dict[str, str]:
    return {"Authorization": f"Bearer {world.tokens['alice']}"}


def test_a_page_of_details_costs_four_statements_whatever_it_holds(world: World) -> None:
    waiting(world, 12)  # 13 waiting with mail-1
    with serving(world, QUIET) as server, httpx.Client(base_url=server.base,
                                                       headers=bearer(world)) as http:
        with counting() as small:
            five = http.get("/api/approvals", params={"limit": 5})
        with counting() as large:
            whole = http.get("/api/approvals", params={"limit": 13})
        pages, link = [], "/api/approvals?limit=5"
        while link:
            got = http.get(link)
            pages.append([c["call_id"] for c in got.json()])
            found = re.match(r"<([^>]+)>; rel=\"next\"", got.headers.get("link", ""))
            link = found.group(1) if found else ""
    assert five.status_code == whole.status_code == 200
    assert len(five.json()) == 5 and len(whole.json()) == 13
    assert len(small) == len(large) == 4, (small, large)
    # Each call still comes with its whole details: its trail and its answers.
    first = whole.json()[0]
    assert first["call_id"] == "mail-1" and first["history"] and first["approvals"] == []
    assert first["decision"]["rule_ids"] == ["mail-needs-a-person"]
    assert [len(p) for p in pages] == [5, 5, 3]  # a short page has no next link
    assert [c for p in pages for c in p] == [c["call_id"] for c in whole.json()]  # ref order
    refs = [c["ref"] for c in whole.json()]
    assert refs == sorted(refs)


def test_a_poll_that_finds_nothing_new_reads_one_aggregate_and_no_page(world: World) -> None:
    waiting(world, 3)
    with serving(world, QUIET) as server, \
            logged_in(server, world, "alice") as (http, _):
        tag = http.get("/inbox/rows").headers["etag"]
        with counting() as polled:
            unchanged = http.get("/inbox/rows", headers={"If-None-Match": tag})
        with counting() as full:
            http.get("/inbox/rows")
        waiting(world, 4)  # a fourth call, m-003, waits now
        grown = http.get("/inbox/rows", headers={"If-None-Match": tag})
        # The first row alice may answer (t1's mail acts for her: hers is not to approve,
        # and the list offers it no box), as she picks one.
        picked = re.search(r'value="(\d+):([0-9a-f]{64})"', grown.text)
        assert picked is not None
        ref = picked.group(1)
        denied = httpx.post(f"{server.base}/api/calls/{ref}/deny", headers=bearer(world),
                            json={"args_hash": picked.group(2)})
        shrunk = http.get("/inbox/rows", headers={"If-None-Match": grown.headers["etag"]})
        same = http.get("/inbox/rows", headers={"If-None-Match": shrunk.headers["etag"]})
    assert unchanged.status_code == 304 and unchanged.headers["etag"] == tag
    assert len(polled) == 1, polled
    assert "LIMIT" not in polled[0].upper() and "count(" in polled[0].lower()
    assert len(full) == 2  # the page and the counts (with the mark in them)
    assert grown.status_code == 200 and grown.headers["etag"] != tag
    assert "m-003" in grown.text
    assert denied.status_code == 200, denied.text
    assert shrunk.status_code == 200 and f'id="row-{ref}"' not in shrunk.text
    assert same.status_code == 304


def _edit(http: httpx.Client, world: World, call_id: str) -> None:
    ref, args_hash = world.shown("many", call_id)
    got = http.post(f"/api/calls/{ref}/approve",
                    json={"args_hash": args_hash, "edit": {"body": f"edited {call_id}"}})
    assert got.status_code == 200 and got.json()["edited"] == ["body"], got.text


def test_a_page_of_details_reads_its_edits_in_one_statement_however_many(
        world: World) -> None:
    """Edited calls wait (approved) until a gate runs them, so a page lists them with
    their edits: one statement for all of them (it was one per edited call)."""
    waiting(world, 6)
    with serving(world, QUIET, tools=True) as server, \
            httpx.Client(base_url=server.base, headers=bearer(world)) as http:
        _edit(http, world, "m-000")
        with counting() as one:
            first = http.get("/api/approvals", params={"limit": 7})
        for call_id in ("m-001", "m-002", "m-003", "m-004"):
            _edit(http, world, call_id)
        with counting() as five:
            later = http.get("/api/approvals", params={"limit": 7})
    assert first.status_code == later.status_code == 200
    edited = {c["call_id"]: c["edits"] for c in later.json() if c["edits"]}
    assert sorted(edited) == ["m-000", "m-001", "m-002", "m-003", "m-004"]
    assert all(len(e) == 1 and e[0]["fields"] == ["body"] and e[0]["by"] == "alice"
               for e in edited.values())
    assert [c["edits"] for c in later.json() if c["call_id"] == "m-005"] == [[]]
    assert len(one) == len(five) == 5, (one, five)
    assert sum("approval_edits" in s for s in five) == 1


QUORUM_POLICY = """
version: 1
operators:
  alice: {roles: [finance]}
  carol: {roles: [finance]}
tools:
  send_email:
    effect: write
    rules:
      - {id: mail-needs-a-person, effect: approve}
  refund:
    effect: write
    rules:
      - id: two-for-a-refund
        effect: approve
        approval: {approvers: {min: 2, roles: [finance]}}
"""


def _refunds(world: World, ids: range) -> None:
    for i in ids:
        assert world.call("refunds", f"r-{i}", "refund", {"order": f"o-{i}", "cents": 100},
                          principal="zoe") == "awaiting_approval"


def test_the_lists_quorum_progress_reads_two_statements_however_many_rows(
        world: World) -> None:
    """The list shows "1 of 2" on each call a quorum rule sent: the calls and their
    answers read once for the page (it was a row and its answers per such call)."""
    world.policy.write_text(QUORUM_POLICY)
    _refunds(world, range(2))
    with serving(world, QUIET) as server, \
            logged_in(server, world, "alice") as (http, _):
        path, body = world.answer("refunds", "r-0")
        carol = httpx.post(f"{server.base}{path}/approve", json=body,
                           headers={"Authorization": f"Bearer {world.tokens['carol']}"})
        assert carol.status_code == 200, carol.text
        with counting() as two:
            small = http.get("/inbox/rows")
        _refunds(world, range(2, 6))
        with counting() as six:
            large = http.get("/inbox/rows")
    assert small.status_code == large.status_code == 200
    rows = re.split(r'(?=id="row-\d+")', large.text)[1:]
    shown = {int(m.group(1)): q.group(1) for row in rows
             if (m := re.match(r'id="row-(\d+)"', row)) is not None
             and (q := re.search(r'<span class="quorum"[^>]*>([^<]+)</span>', row))}
    progress = {world.shown("refunds", f"r-{i}")[0]: "0 of 2" for i in range(1, 6)}
    progress[world.shown("refunds", "r-0")[0]] = "1 of 2"
    assert shown == progress  # and none on the mail, which no quorum rule sent
    # the page, the counts, and the quorum calls with their answers: 2 + 2 either way
    assert len(two) == len(six) == 4, (two, six)
