"""The JSON API's bodies bounded over real HTTP on loopback (``serve.bodies``): one
bound for every ``/api`` body, ``MAX_BODY_BYTES``, held before the route parses a
byte. A known operator's token comes with each oversized body, so that what refuses
it is the bound; a body too big is refused before the server read it (the raw-socket
cases send less than they announce, or stop just past the bound without ending the
body, and read the answer), nothing of it is quoted, and the call stays as it was.
A request with no token is refused before any of its body is read, as before."""

from __future__ import annotations

import json

import httpx
import pytest
from serve_world import Running, World, raw_post

from agent_gate.ledger import Ledger
from agent_gate.policy.edits import MAX_VALUE_CHARS
from agent_gate.serve.bodies import MAX_BODY_BYTES

MARK = "zq-api-5d7b"
"""In every refused body: no response may hold it."""


def _unchanged(world: World) -> None:
    with Ledger(world.url) as ledger:
        details = ledger.call_details("t1", "mail-1")
    assert details is not None
    assert details.call.state.value == "awaiting_approval" and details.approvals == ()
    assert world.runs == []


def _head(path: str, token: str | None, *, length: int | None) -> str:
    auth = f"Authorization: Bearer {token}\r\n" if token is not None else ""
    size = (f"Content-Length: {length}\r\n" if length is not None
            else "Transfer-Encoding: chunked\r\n")
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n"
            f"{size}\r\n")


@pytest.mark.parametrize("route", ["approve", "deny", "resolve", "reveal"])
def test_a_body_announced_past_the_bound_is_refused_before_it_is_sent(
        world: World, server: Running, route: str) -> None:
    """A gigabyte announced with an operator's token, not one byte of it sent: 413 at
    once, naming the bound and nothing else."""
    ref, _ = world.shown("t1", "mail-1")
    status, got = raw_post(server, _head(f"/api/calls/{ref}/{route}", world.tokens["alice"],
                                     length=10**9))
    assert status == 413 and f"at most {MAX_BODY_BYTES} bytes".encode() in got
    _unchanged(world)


def test_a_streamed_body_is_refused_once_it_passes_the_bound(
        world: World, server: Running) -> None:
    """No length announced (chunked): read up to the bound and one byte more, then 413
    without waiting for the body's end, which never comes."""
    ref, _ = world.shown("t1", "mail-1")
    chunk = MARK.encode() * (65536 // len(MARK))
    whole, extra = divmod(MAX_BODY_BYTES + 1, len(chunk))
    frames = [b"%x\r\n%s\r\n" % (len(chunk), chunk)] * whole
    frames.append(b"%x\r\n%s\r\n" % (extra, chunk[:extra]))
    status, got = raw_post(server, _head(f"/api/calls/{ref}/approve", world.tokens["alice"],
                                     length=None), b"".join(frames))
    assert status == 413 and f"at most {MAX_BODY_BYTES} bytes".encode() in got
    assert MARK.encode() not in got
    _unchanged(world)


def test_a_whole_body_past_the_bound_is_refused_and_not_quoted(
        world: World, server: Running) -> None:
    """A well-formed answer whose reason makes it a byte too big: 413, nothing of it in
    the response, and the same client's next answer within the bound is taken."""
    path, body = world.answer("t1", "mail-1")
    text = json.dumps({**body, "reason": ""})
    body["reason"] = MARK * ((MAX_BODY_BYTES - len(text)) // len(MARK) + 1)
    sent = json.dumps(body).encode()
    assert len(sent) > MAX_BODY_BYTES
    with httpx.Client(base_url=server.base,
                      headers={"Authorization": f"Bearer {world.tokens['alice']}"}) as http:
        got = http.post(path + "/approve", content=sent,
                        headers={"Content-Type": "application/json"})
        assert got.status_code == 413 and MARK not in got.text and len(got.text) < 300
        assert got.headers["x-frame-options"] == "DENY"  # the refusal is a response of ours
        _unchanged(world)
        fine = http.post(path + "/deny", json={"args_hash": body["args_hash"]})
    assert fine.status_code == 200, fine.text


def test_the_largest_honest_edit_is_read_and_judged(world: World, server: Running) -> None:
    """Four fields of the longest value, each character the longest to write in JSON (a
    surrogate pair of escapes, as Python's json.dumps sends it): read whole and judged
    by the edit's own rules (two of the fields are not editable: 422, named), not
    refused by the bound."""
    path, body = world.answer("t1", "mail-1")
    longest = "\N{GRINNING FACE}" * MAX_VALUE_CHARS
    body["edit"] = {name: longest for name in ("subject", "body", "to", "cc")}
    sent = json.dumps(body).encode()
    assert len(sent) > 3 * 1024 * 1024 and len(sent) <= MAX_BODY_BYTES
    with httpx.Client(base_url=server.base, timeout=60,
                      headers={"Authorization": f"Bearer {world.tokens['bob']}"}) as http:
        got = http.post(path + "/approve", content=sent,
                        headers={"Content-Type": "application/json"})
    assert got.status_code == 422, got.text[:300]
    assert "not editable" in got.text and "\\ud83d" not in got.text
    _unchanged(world)


def test_a_request_without_a_token_is_refused_before_its_body_is_read(
        world: World, server: Running) -> None:
    """A small body announced and not sent, with no token: 401 at once (were the body
    read first, the server would wait for it), and the bound is not what refused it."""
    ref, _ = world.shown("t1", "mail-1")
    status, got = raw_post(server, _head(f"/api/calls/{ref}/approve", None, length=100))
    assert status == 401 and b"at most" not in got
