"""``agent-gate serve``'s JSON API over real HTTP on loopback (httpx, uvicorn).

Who may do what: no token and a wrong token are 401, another operator's tools and
the task's own principal are 403, and every refusal is in the audit chain under the
name of who tried; an approval given here is used once by the agent's next resume.
"""

from __future__ import annotations

from typing import Any

import httpx
from serve_world import Running, World, serving

from agent_gate.ledger import Ledger
from agent_gate.ledger.checkpoints import take


def bearer(world: World, name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {world.tokens[name]}"}


def refusals(world: World, event: str) -> list[Any]:
    return [e for e in world.audit()
            if e.event == event and e.detail and e.detail.get("allowed") is False]


def test_health_is_open_and_everything_else_needs_a_token(
        world: World, server: Running) -> None:
    with httpx.Client(base_url=server.base) as http:
        assert http.get("/health").json() == {"status": "ok"}
        no_schema = http.get("/openapi.json")
        schema = http.get("/openapi.json", headers=bearer(world, "bob")).json()
        assert {"/api/approvals", "/api/calls/{ref}/approve",
                "/api/calls/{ref}/deny"} <= set(schema["paths"])
        missing = http.get("/api/approvals")
        wrong = http.get("/api/approvals", headers={"Authorization": "Bearer agop_nope"})
        path, body = world.answer("t1", "mail-1")
        posted = http.post(f"{path}/approve", json=body)
    assert (no_schema.status_code, missing.status_code, wrong.status_code,
            posted.status_code) == (401, 401, 401, 401)
    assert missing.headers["www-authenticate"] == "Bearer"
    reasons = [e.detail["reason"] for e in refusals(world, "operator_api_auth")]
    assert reasons == ["no bearer token", "no bearer token", "unknown token",
                       "no bearer token"]
    assert all(e.actor == "anonymous" for e in refusals(world, "operator_api_auth"))
    assert "agop_nope" not in str([e.detail for e in world.audit()])


def test_an_operator_reads_the_waiting_call_whole(world: World, server: Running) -> None:
    with httpx.Client(base_url=server.base, headers=bearer(world, "carol")) as http:
        waiting = http.get("/api/approvals").json()
        one = http.get(f"/api/calls/{waiting[0]['ref']}").json()
        named = http.get("/api/calls", params={"task": "t1", "call": "mail-1"}).json()
        tasks = http.get("/api/tasks").json()
        timeline = http.get("/api/timeline", params={"task": "t1"}).json()
        missing = http.get("/api/calls", params={"call": "nope"})
        no_row = http.get("/api/calls/99999")
    assert [(c["call_id"], c["tool"], c["state"]) for c in waiting] == \
        [("mail-1", "send_email", "awaiting_approval")]
    assert named == one and (one["ref"], one["args_hash"]) == world.shown("t1", "mail-1")
    assert one["arguments"] == {"to": "ana@elsewhere.org", "subject": "Refund",
                                "body": "Dear Ana"}
    assert one["decision"]["rule_ids"] == ["mail-needs-a-person"]
    assert [t["task"] for t in tasks] == ["t1"] and tasks[0]["counts"] == \
        {"awaiting_approval": 1}
    assert [c["call_id"] for c in timeline["calls"]] == ["mail-1"]
    assert [e["to"] for e in timeline["timeline"] if e["call"] == "mail-1"] == \
        ["received", "awaiting_approval"]
    assert missing.status_code == 404 and no_row.status_code == 404


def test_another_operators_tools_are_refused_and_audited(
        world: World, server: Running) -> None:
    path, body = world.answer("t1", "mail-1")
    with httpx.Client(base_url=server.base, headers=bearer(world, "carol")) as http:
        approve = http.post(f"{path}/approve", json={**body, "reason": "looks fine"})
        deny = http.post(f"{path}/deny", json=body)
    assert (approve.status_code, deny.status_code) == (403, 403)
    assert "may not approve 'send_email'" in approve.json()["detail"]
    refused = refusals(world, "operator_approve") + refusals(world, "operator_deny")
    assert [(e.actor, e.call_id, e.task_id) for e in refused] == [
        ("operator:carol", "mail-1", "t1"), ("operator:carol", "mail-1", "t1")]
    with world.gate() as gate:
        assert [o.state.value for o in gate.resume("t1")] == ["awaiting_approval"]
    assert world.runs == []


def test_the_tasks_own_principal_may_not_approve_its_calls(
        world: World, server: Running) -> None:
    path, body = world.answer("t1", "mail-1")
    with httpx.Client(base_url=server.base, headers=bearer(world, "alice")) as http:
        got = http.post(f"{path}/approve", json=body)
    assert got.status_code == 403 and "principal" in got.json()["detail"]
    refused = [e for e in world.audit() if e.event == "approval_refused"]
    assert [e.actor for e in refused] == ["operator:alice"]


def test_with_no_policy_file_the_principal_is_refused_too(world: World) -> None:
    with serving(world, policy=False) as server, httpx.Client(
            base_url=server.base, headers=bearer(world, "alice")) as http:
        path, body = world.answer("t1", "mail-1")
        got = http.post(f"{path}/approve", json=body)
    assert got.status_code == 403 and "may not approve its own calls" in got.json()["detail"]
    refused = refusals(world, "operator_approve")
    assert [(e.actor, e.call_id) for e in refused] == [("operator:alice", "mail-1")]
    with world.gate() as gate:
        assert [o.state.value for o in gate.resume("t1")] == ["awaiting_approval"]


def test_approved_through_the_api_the_call_runs_once_on_resume(
        world: World, server: Running) -> None:
    path, body = world.answer("t1", "mail-1")
    with httpx.Client(base_url=server.base, headers=bearer(world, "bob")) as http:
        got = http.post(f"{path}/approve",
                        json={**body, "reason": "customer asked", "expires_in": 600})
        again = http.get(path).json()
    assert got.status_code == 200, got.text
    body = got.json()
    assert (body["by"], body["reason"], body["new"], body["tool"]) == \
        ("bob", "customer asked", True, "send_email")
    assert body["expires_at"] is not None
    assert [a["by"] for a in again["approvals"]] == ["bob"]
    with world.gate() as gate:
        first = gate.resume("t1")
        second = gate.resume("t1")
    assert [o.state.value for o in first] == ["succeeded"]
    assert second == []  # nothing left to run: resume never runs it again
    assert world.runs == ["send_email ana@elsewhere.org"]


def test_a_denial_through_the_api_means_it_never_runs(world: World, server: Running) -> None:
    path, body = world.answer("t1", "mail-1")
    with httpx.Client(base_url=server.base, headers=bearer(world, "bob")) as http:
        got = http.post(f"{path}/deny", json={**body, "reason": "phishing"})
        twice = http.post(f"{path}/deny", json=body)
    assert got.status_code == 200 and got.json()["state"] == "rejected"
    assert twice.status_code == 409
    with world.gate() as gate:
        gate.resume("t1")
    assert world.runs == []


def test_in_doubt_calls_are_resolved_by_who_may(world: World, server: Running) -> None:
    assert world.call("t2", "charge-1", "charge_card", {"order": "o-7"}) == "in_doubt"
    path, body = world.answer("t2", "charge-1")
    with httpx.Client(base_url=server.base) as http:
        listed = http.get("/api/in-doubt", headers=bearer(world, "bob")).json()
        refused = http.post(f"{path}/resolve", headers=bearer(world, "bob"),
                            json={**body, "as": "succeeded"})
        done = http.post(f"{path}/resolve", headers=bearer(world, "carol"),
                         json={**body, "as": "succeeded", "result": {"ok": True},
                               "reason": "processor shows the charge"})
    assert [c["call_id"] for c in listed] == ["charge-1"]
    assert refused.status_code == 403
    assert [e.actor for e in refusals(world, "operator_resolve")] == ["operator:bob"]
    assert done.status_code == 200 and done.json()["state"] == "succeeded"
    settled = [e for e in world.audit() if e.call_id == "charge-1" and e.to_state == "succeeded"]
    assert [e.actor for e in settled] == ["operator:carol"]


def test_the_audit_trail_pages_verifies_and_shows_its_head(
        world: World, server: Running) -> None:
    with httpx.Client(base_url=server.base, headers=bearer(world, "bob")) as http:
        first = http.get("/api/audit", params={"limit": 2}).json()
        rest = http.get("/api/audit", params={"after": first[-1]["seq"]}).json()
        none_yet = http.get("/api/audit/head").json()
        with Ledger(world.url) as ledger:
            taken = take(ledger.engine)
        head = http.get("/api/audit/head").json()
        verified = http.get("/api/audit/verify").json()
    seqs = [e["seq"] for e in first + rest]
    assert seqs == list(range(1, len(seqs) + 1))
    assert none_yet == {"id": 0, "hash": None}
    assert head == taken.to_dict() and head["anchor"] == f"{taken.id}:{taken.hash}"
    assert verified["ok"] is True and verified["checkpoint"] == head


def test_a_removed_operator_is_out_at_once(world: World, server: Running) -> None:
    from agent_gate.ledger import Ledger
    from agent_gate.ledger.views.operators import Operators

    with httpx.Client(base_url=server.base, headers=bearer(world, "bob")) as http:
        assert http.get("/api/approvals").status_code == 200
        with Ledger(world.url) as ledger:
            assert Operators(ledger.engine).remove("bob")
        assert http.get("/api/approvals").status_code == 401
