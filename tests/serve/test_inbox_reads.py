"""What the inbox's reads cost, in statements: a page of calls with their whole details
(``/api/approvals``, ``/api/in-doubt``) costs three statements whatever the page
holds (not three per call), and the list's poll that finds nothing new costs one
aggregate over the calls, no page read, before its 304.

Statements are counted as the database driver is handed them (SQLAlchemy's
``before_cursor_execute`` on every engine of the process: the server runs in a thread
of it), only those that read the calls, their trail or their answers.
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

_TABLES = re.compile(r"\b(tool_calls|audit_events|approvals)\b")


@contextmanager
def counting() -> Iterator[list[str]]:
    """The statements that read calls, trails or answers while the block runs."""
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


def test_a_page_of_details_costs_three_statements_whatever_it_holds(world: World) -> None:
    waiting(world, 12)  # 13 waiting with mail-1
    config = ServeConfig(checkpoint_every=None)
    with serving(world, config) as server, httpx.Client(base_url=server.base,
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
    assert len(small) == len(large) == 3, (small, large)
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
    with serving(world, ServeConfig(checkpoint_every=None)) as server, \
            logged_in(server, world, "alice") as (http, _):
        tag = http.get("/inbox/rows").headers["etag"]
        with counting() as polled:
            unchanged = http.get("/inbox/rows", headers={"If-None-Match": tag})
        with counting() as full:
            http.get("/inbox/rows")
        waiting(world, 4)  # a fourth call, m-003, waits now
        grown = http.get("/inbox/rows", headers={"If-None-Match": tag})
        ref = re.findall(r'id="row-(\d+)"', grown.text)[0]
        hashed = re.search(rf'value="{ref}:([0-9a-f]{{64}})"', grown.text)
        assert hashed is not None
        denied = httpx.post(f"{server.base}/api/calls/{ref}/deny", headers=bearer(world),
                            json={"args_hash": hashed.group(1)})
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
