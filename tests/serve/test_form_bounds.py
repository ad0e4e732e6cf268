"""The inbox's form routes attacked over real HTTP on loopback (``serve.bodies``): many
fields, a huge field, multipart with a file, other content types, a body bigger than
any form needs, announced or streamed. Each is refused cleanly (4xx, no 500, nothing
of what was sent quoted), the call stays as it was, and a body too big is refused
before the server has read it: the raw-socket cases send less than they announce, or
stop just past the bound without ending the body, and read the answer.

The form-shaped attacks carry a valid session, CSRF token and args_hash, so that what
refuses them is the bound, not the CSRF check.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from serve_world import Running, World, logged_in, raw_post

from agent_gate.ledger import Ledger
from agent_gate.serve.bodies import FORM_PART_BYTES, MAX_BODY_BYTES, MAX_FORM_FIELDS

MARK = "zq-form-9c1e"
"""In every refused field: no response may hold it."""


def _unchanged(world: World, args_hash: str) -> None:
    with Ledger(world.url) as ledger:
        details = ledger.call_details("t1", "mail-1")
    assert details is not None
    assert (details.call.state.value, details.call.args_hash) == ("awaiting_approval",
                                                                  args_hash)
    assert details.approvals == () and world.runs == []


def _answer_form(world: World, csrf: str) -> tuple[int, dict[str, str]]:
    ref, args_hash = world.shown("t1", "mail-1")
    return ref, {"csrf": csrf, "args_hash": args_hash, "expires_in": "24h"}


POSTS: list[tuple[str, Any, int, str]] = [
    ("more fields than any form has",
     lambda form: {"data": {**form, **{f"{MARK}-{i}": MARK for i in range(MAX_FORM_FIELDS)}}},
     400, f"Maximum number of fields is {MAX_FORM_FIELDS}"),
    ("a field longer than any form's",
     lambda form: {"data": {**form, "reason": MARK + "x" * FORM_PART_BYTES}},
     400, "Field exceeded maximum size"),
    ("multipart with a file",
     lambda form: {"data": form, "files": {"upload": (f"{MARK}.txt", MARK.encode() * 100,
                                                      "text/plain")}},
     415, "no file is taken"),
    ("multipart without a file",
     lambda form: {"data": form, "files": {"reason": (None, MARK)}},
     415, "application/x-www-form-urlencoded"),
    ("JSON", lambda form: {"json": {**form, "reason": MARK}}, 415,
     "application/x-www-form-urlencoded"),
    ("text/plain", lambda form: {"content": "&".join(f"{k}={v}" for k, v in form.items())
                                 + f"&reason={MARK}",
                                 "headers": {"Content-Type": "text/plain"}},
     415, "application/x-www-form-urlencoded"),
]


@pytest.mark.parametrize(("what", "make", "status", "says"), POSTS, ids=[p[0] for p in POSTS])
def test_a_form_past_its_bounds_is_refused_and_answers_nothing(
        world: World, server: Running, what: str, make: Any, status: int, says: str) -> None:
    with logged_in(server, world, "bob") as (http, csrf):
        ref, form = _answer_form(world, csrf)
        got = http.post(f"/inbox/calls/{ref}/approve", **make(form))
        # the same session still answers a form within the bounds
        fine = http.get(f"/inbox/calls/{ref}")
    assert got.status_code == status, (what, got.status_code, got.text[:300])
    assert says in got.text and MARK not in got.text and len(got.text) < 500
    assert got.headers["x-frame-options"] == "DENY"  # the refusal is a response of ours
    assert fine.status_code == 200
    _unchanged(world, form["args_hash"])


def test_a_bulk_answer_of_the_most_rows_fits_the_bounds(world: World, server: Running) -> None:
    """The largest honest form: MAX_PICKS ticked rows (none of them real) are read and
    answered one by one, not refused by the form's bounds."""
    from agent_gate.serve.bodies import MAX_PICKS

    with logged_in(server, world, "bob") as (http, csrf):
        picks = [f"{2_000_000 + i}:{'ab' * 32}" for i in range(MAX_PICKS)]
        got = http.post("/inbox/bulk", data={"csrf": csrf, "action": "deny", "back": "",
                                             "pick": picks})
        page = http.get(got.headers.get("location", "/inbox")).text
    assert got.status_code == 303, got.text[:300]
    assert f"Denied 0 of {MAX_PICKS}" in page


@pytest.mark.parametrize("path", ["/login", "/inbox/calls/1/approve", "/inbox/bulk",
                                  "/slack/interactions/approvals"])
def test_a_body_announced_bigger_than_any_form_is_refused_before_it_is_sent(
        world: World, server: Running, path: str) -> None:
    """A gigabyte announced and not one byte of it sent: refused at once (413), on
    routes a person reaches before logging in too (the login, a Slack click)."""
    status, got = raw_post(server, f"POST {path} HTTP/1.1\r\nHost: x\r\n"
                               "Content-Type: application/x-www-form-urlencoded\r\n"
                               f"Content-Length: {10**9}\r\n\r\n")
    assert status == 413 and f"at most {MAX_BODY_BYTES} bytes".encode() in got


def test_a_streamed_body_is_refused_once_it_passes_the_bound(
        world: World, server: Running) -> None:
    """No length announced (chunked): the server reads up to the bound and one byte
    more, then refuses (413) without waiting for the body's end, which never comes."""
    chunk = b"a" * 65536
    whole, extra = divmod(MAX_BODY_BYTES + 1, len(chunk))
    frames = [b"%x\r\n%s\r\n" % (len(chunk), chunk)] * whole
    frames.append(b"%x\r\n%s\r\n" % (extra, b"a" * extra))
    status, got = raw_post(server, "POST /login HTTP/1.1\r\nHost: x\r\n"
                               "Content-Type: application/x-www-form-urlencoded\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n", b"".join(frames))
    assert status == 413 and f"at most {MAX_BODY_BYTES} bytes".encode() in got


def test_the_api_takes_json_as_before(world: World, server: Running) -> None:
    """The form's type is the forms' rule: the JSON API takes JSON (its bodies' size is
    bounded too, ``test_api_bounds.py``)."""
    path, body = world.answer("t1", "mail-1")
    with httpx.Client(base_url=server.base,
                      headers={"Authorization": f"Bearer {world.tokens['bob']}"}) as http:
        got = http.post(path + "/deny", json=body)
    assert got.status_code == 200, got.text
