"""The web inbox's login, session and CSRF rules, over real HTTP (httpx, uvicorn).

A browser session comes only from the login form; its cookie is HttpOnly and
SameSite=Strict; a form that changes something needs the session's CSRF token and
this server's origin; failed logins from one address are limited. Each refusal is
in the audit chain.
"""

from __future__ import annotations

import httpx
from serve_world import Running, World, logged_in

from agent_gate import Principal


def test_the_session_cookie_is_httponly_and_samesite_strict(
        world: World, server: Running) -> None:
    with httpx.Client(base_url=server.base) as http:
        assert http.get("/inbox").headers["location"] == "/login"
        got = http.post("/login", data={"token": world.tokens["bob"]},
                        headers={"Origin": server.base})
    cookie = got.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert world.tokens["bob"] not in cookie
    logins = [e for e in world.audit() if e.event == "operator_login"]
    assert [(e.actor, e.detail["allowed"]) for e in logins] == [("operator:bob", True)]


def test_the_inbox_shows_the_waiting_call_and_its_arguments(
        world: World, server: Running) -> None:
    with logged_in(server, world, "bob") as (http, _):
        page = http.get("/inbox").text
        ref, _ = world.shown("t1", "mail-1")
        call = http.get(f"/inbox/calls/{ref}").text
        named = http.get("/inbox/call", params={"task": "t1", "call": "mail-1"})
        nowhere = http.get("/inbox/call", params={"task": "t1", "call": "../../audit"})
        audit = http.get("/inbox/audit", params={"verify": "1"}).text
    assert (named.status_code, named.headers["location"]) == (303, f"/inbox/calls/{ref}")
    assert nowhere.status_code == 404
    assert "send_email" in page and "ana@elsewhere.org" in page
    assert "mail-needs-a-person" in call and "Every mail is read by a person first." in call
    assert "Trail verified" in audit


def test_a_form_without_the_csrf_token_or_from_elsewhere_is_refused(
        world: World, server: Running) -> None:
    ref, shown = world.shown("t1", "mail-1")
    target = f"/inbox/calls/{ref}/approve"
    with logged_in(server, world, "bob") as (http, csrf):
        no_token = http.post(target, data={"reason": "x", "args_hash": shown})
        wrong = http.post(target, data={"csrf": "guess", "args_hash": shown})
        elsewhere = http.post(target, data={"csrf": csrf, "args_hash": shown},
                              headers={"Origin": "http://evil.example"})
        ok = http.post(target, data={"csrf": csrf, "reason": "fine", "expires_in": "2h",
                                     "args_hash": shown}, follow_redirects=True)
    assert (no_token.status_code, wrong.status_code, elsewhere.status_code) == (403, 403, 403)
    assert ok.status_code == 200 and "Approved call mail-1" in ok.text
    # Back to the list, not to a page of its own.
    assert [r.status_code for r in ok.history] == [303] and ok.url.path == "/inbox"
    refused = [e for e in world.audit() if e.event == "operator_form_approve"]
    assert [e.detail["reason"] for e in refused] == [
        "the form's CSRF token is missing or wrong", "the form's CSRF token is missing or wrong",
        "the form came from another origin"]
    assert {e.actor for e in refused} == {"operator:bob"}
    with world.gate() as gate:
        assert [o.state.value for o in gate.resume("t1")] == ["succeeded"]
    assert world.runs == ["send_email ana@elsewhere.org"]


def test_outside_ones_rights_the_form_is_403(world: World, server: Running) -> None:
    ref, shown = world.shown("t1", "mail-1")
    with logged_in(server, world, "carol") as (http, csrf):
        got = http.post(f"/inbox/calls/{ref}/deny", data={"csrf": csrf, "args_hash": shown})
    assert got.status_code == 403 and "may not deny" in got.text


def test_failed_logins_are_limited_per_address_and_audited(
        world: World, server: Running) -> None:
    with httpx.Client(base_url=server.base, headers={"Origin": server.base}) as http:
        wrong = [http.post("/login", data={"token": f"agop_wrong{i}"}).status_code
                 for i in range(server.limiter.failures)]
        blocked = http.post("/login", data={"token": world.tokens["bob"]})
    assert wrong == [401] * server.limiter.failures
    assert blocked.status_code == 429 and "set-cookie" not in blocked.headers
    reasons = [e.detail["reason"] for e in world.audit() if e.event == "operator_login"]
    assert reasons == ["unknown token"] * server.limiter.failures + ["too many failed logins"]


def test_a_cross_origin_login_is_refused(world: World, server: Running) -> None:
    with httpx.Client(base_url=server.base) as http:
        got = http.post("/login", data={"token": world.tokens["bob"]},
                        headers={"Origin": "http://evil.example"})
    assert got.status_code == 403 and "set-cookie" not in got.headers


def test_logout_needs_the_csrf_token_and_ends_the_session(
        world: World, server: Running) -> None:
    with logged_in(server, world, "bob") as (http, csrf):
        forged = http.post("/logout", data={})
        still = http.get("/inbox")
        out = http.post("/logout", data={"csrf": csrf})
        after = http.get("/inbox")
    assert forged.status_code == 403 and still.status_code == 200
    assert out.status_code == 303
    assert after.status_code == 303 and after.headers["location"] == "/login"


def test_an_approval_says_what_runs_the_call_next(world: World, server: Running) -> None:
    """A call the MCP proxy holds (its task recorded under provider ``mcp``) runs in the
    proxy once approved; any other runs on the next resume."""
    with world.gate() as gate:
        held = gate.execute("mcp-session-1", {"call_id": "mcp-1", "name": "send_email",
                                              "provider": "mcp", "arguments": {
                                                  "to": "a@b.org", "subject": "s", "body": "b"}},
                            principal=Principal(id="zoe"))
    assert held.state.value == "awaiting_approval"
    with logged_in(server, world, "bob") as (http, csrf):
        said = []
        for task, call in (("mcp-session-1", "mcp-1"), ("t1", "mail-1")):
            ref, shown = world.shown(task, call)
            got = http.post(f"/inbox/calls/{ref}/approve",
                            data={"csrf": csrf, "args_hash": shown}, follow_redirects=True)
            assert got.status_code == 200, got.text
            said.append(got.text)
    assert "the MCP proxy that holds it runs it once" in said[0] and "resume" not in \
        said[0].replace("not agent-gate resume", "")
    assert "agent-gate resume t1 --tools" in said[1]
