"""``POST /api/answers``: one approval or denial for many calls, over real HTTP on
loopback (the real app under uvicorn; SQLite, and PostgreSQL when configured).

Each item is answered as the single route would answer it alone (the same rights, the
same ``args_hash`` binding, its own transaction) and gets its own result in request
order; one refused item never takes the others down. Every answer and every refusal
is in the audit chain once. A body is judged whole before anything is answered: too
many items, a ref named twice or a malformed item is a 422 naming the item, quoting
nothing sent; no token is a 401 before any of the body is read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from serve_world import (
    ESCALATING,
    POLICY,
    REFUND_REASON,
    World,
    build_world,
    raw_post,
    serving,
)
from test_api_bounds import _head
from test_inbox_escalated import _sweep_until_escalated

from agent_gate.ledger import Ledger
from agent_gate.serve.bodies import MAX_PICKS
from agent_gate.serve.webhooks import ServeConfig

QUIET = ServeConfig(sweep_every=None, checkpoint_every=None)
"""No sweep nor checkpoint of the server's own: the trail holds what the requests did."""
MARK = "zq-bulk-91c4"
"""In refused bodies: no response may hold it."""


def _client(base: str, world: World, name: str) -> httpx.Client:
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {world.tokens[name]}"})


def _item(world: World, task: str, call_id: str) -> dict[str, Any]:
    ref, args_hash = world.shown(task, call_id)
    return {"ref": ref, "args_hash": args_hash}


def _mails(world: World, task: str, n: int, principal: str = "dave") -> None:
    for i in range(n):
        assert world.call(task, f"m-{i}", "send_email",
                          {"to": f"to{i}@elsewhere.org", "subject": "s", "body": "b"},
                          principal=principal) == "awaiting_approval"


def _seq(world: World) -> int:
    return max(e.seq for e in world.audit())


def _since(world: World, seq: int) -> list[Any]:
    return [e for e in world.audit() if e.seq > seq]


def _states(world: World, task: str, *call_ids: str) -> list[str]:
    with Ledger(world.url) as ledger:
        return [ledger.get(task, c).state.value for c in call_ids]  # type: ignore[union-attr]


def test_a_mixed_batch_answers_the_good_items_and_says_why_not_for_each_other(
        db_url: str, tmp_path: Path) -> None:
    # bob approves every tool and holds no role; refunds escalate to finance (carol)
    world = build_world(db_url, tmp_path, ESCALATING, {
        "bob": {"approve": ["*"]}, "carol": {"approve": ["refund"]}}, body="Dear Ana")
    _mails(world, "b", 4)
    assert world.call("b", "r-1", "refund", {"order": "o-1", "cents": 500},
                      principal="dave") == "awaiting_approval"
    _sweep_until_escalated(world, "b", "r-1")
    ok0, ok1, stale, gone, escalated = (_item(world, "b", c)
                                        for c in ("m-0", "m-1", "m-2", "m-3", "r-1"))
    stale = {**stale, "args_hash": "e" * 64}  # what was shown before the arguments changed
    unknown = {"ref": 999999, "args_hash": "0" * 64}
    sent = [ok0, stale, gone, unknown, escalated, ok1]
    with serving(world, QUIET) as server, _client(server.base, world, "bob") as http:
        assert http.post(f"/api/calls/{gone['ref']}/deny", json={
            "args_hash": gone["args_hash"]}).status_code == 200
        before = _seq(world)
        got = http.post("/api/answers", json={"decision": "approve", "items": sent,
                                              "reason": "checked", "expires_in": 600})
    assert got.status_code == 200, got.text
    body = got.json()
    assert (body["decision"], body["answered"], body["refused"]) == ("approve", 2, 4)
    results = body["results"]
    assert [r["ref"] for r in results] == [i["ref"] for i in sent]  # request order
    assert [(r["outcome"], r["status"], r.get("error")) for r in results] == [
        ("answered", 200, None), ("refused", 412, "AnswerMismatch"),
        ("refused", 409, "NotAwaitingApproval"), ("refused", 404, "GateUsageError"),
        ("refused", 403, "ApprovalRefused"), ("answered", 200, None)]
    assert "escalated to role 'finance'" in results[4]["detail"]
    assert [r["call_id"] for r in results] == ["m-0", "m-2", "m-3", None, "r-1", "m-1"]
    assert "to2@" not in got.text and "Dear" not in got.text  # no argument values
    # The ledger: the two good ones approved, bound to the reason; the rest as they were.
    with Ledger(world.url) as ledger:
        approvals = {c: [(a.decided_by, a.reason) for a in d.approvals] for c in
                     ("m-0", "m-1", "m-2", "r-1")
                     if (d := ledger.call_details("b", c)) is not None}
    assert approvals == {"m-0": [("bob", "checked")], "m-1": [("bob", "checked")],
                         "m-2": [], "r-1": []}
    # One entry in the chain per answer and per refusal, each under bob's name.
    entries = _since(world, before)
    assert sorted((e.call_id or str(e.detail.get("ref")), e.event) for e in entries) == sorted([
        ("m-0", "approval_granted"), ("m-1", "approval_granted"), ("m-2", "answer_refused"),
        ("m-3", "operator_approve"), ("999999", "operator_approve"),
        ("r-1", "approval_refused")])
    assert {e.actor for e in entries} == {"operator:bob"}
    refused = {e.call_id: e.detail for e in entries if e.event == "operator_approve"}
    assert refused["m-3"]["status"] == 409 and refused[None]["status"] == 404
    # A gate run executes exactly the two approved calls.
    with world.gate() as gate:
        ran = gate.resume("b")
    assert sorted(world.runs) == ["send_email to0@elsewhere.org", "send_email to1@elsewhere.org"]
    assert sorted((o.call_id, o.state.value) for o in ran if o.state.value == "succeeded") == [
        ("m-0", "succeeded"), ("m-1", "succeeded")]
    assert _states(world, "b", "m-2", "m-3", "r-1") == [
        "awaiting_approval", "rejected", "awaiting_approval"]


def test_a_bulk_denial_ends_each_call_and_the_schema_lists_the_route(
        db_url: str, tmp_path: Path) -> None:
    world = build_world(db_url, tmp_path, POLICY, {"bob": {"approve": ["send_email"]}},
                        body="Dear Ana")
    _mails(world, "d", 3)
    items = [_item(world, "d", f"m-{i}") for i in range(3)]
    with serving(world, QUIET) as server, _client(server.base, world, "bob") as http:
        got = http.post("/api/answers", json={"decision": "deny", "items": items,
                                              "reason": "phishing"})
        again = http.post("/api/answers", json={"decision": "deny", "items": items[:1]})
        schema = http.get("/openapi.json").json()
    assert got.status_code == 200 and got.json()["answered"] == 3
    assert _states(world, "d", "m-0", "m-1", "m-2") == ["rejected"] * 3
    assert [(r["outcome"], r["status"]) for r in again.json()["results"]] == [("refused", 409)]
    post = schema["paths"]["/api/answers"]["post"]
    assert "many waiting calls" in post["summary"]
    body = schema["components"]["schemas"]["AnswersBody"]
    assert body["properties"]["items"]["maxItems"] == MAX_PICKS
    with world.gate() as gate:
        gate.resume("d")
    assert world.runs == []


def test_no_token_is_refused_before_the_body_is_read(world: World) -> None:
    with serving(world, QUIET) as server:
        # a small body announced and never sent: were it read first, this would hang
        status, got = raw_post(server, _head("/api/answers", None, length=100))
        not_json = httpx.post(f"{server.base}/api/answers", content=b"\x00{" + MARK.encode(),
                              headers={"Content-Type": "application/json"})
        wrong = httpx.post(f"{server.base}/api/answers", json={"decision": "approve"},
                           headers={"Authorization": "Bearer agop_nope"})
    assert status == 401 and b"at most" not in got
    assert (not_json.status_code, wrong.status_code) == (401, 401)
    assert MARK not in not_json.text
    reasons = [e.detail["reason"] for e in world.audit() if e.event == "operator_api_auth"]
    assert reasons == ["no bearer token", "no bearer token", "unknown token"]


def test_a_body_that_cannot_stand_is_refused_whole_naming_the_item(
        world: World) -> None:
    item = _item(world, "t1", "mail-1")
    bad: dict[str, dict[str, Any]] = {
        "too many": {"decision": "deny", "items": [
            {"ref": i, "args_hash": "a" * 64} for i in range(1, MAX_PICKS + 2)]},
        "none": {"decision": "deny", "items": []},
        "twice": {"decision": "approve", "items": [item, {"ref": 5, "args_hash": "b" * 64},
                                                   {**item, "args_hash": "c" * 64}]},
        "decision": {"decision": MARK, "items": [item]},
        "edit": {"decision": "approve", "items": [item], "edit": {"body": MARK}},
        "grant": {"decision": "approve", "items": [item], "grant": "g"},
        "hash": {"decision": "deny", "items": [item, {"ref": item["ref"] + 1,
                                                      "args_hash": MARK + "\x00"}]},
        "ref text": {"decision": "deny", "items": [{"ref": str(item["ref"]),
                                                    "args_hash": item["args_hash"]}]},
        "ref huge": {"decision": "deny", "items": [{"ref": 10**40,
                                                    "args_hash": item["args_hash"]}]},
        "ref bool": {"decision": "deny", "items": [{"ref": True, "args_hash": "a" * 64}]},
        "extra": {"decision": "deny", "items": [{**item, "task": MARK}]},
        "missing": {"decision": "deny", "items": [{"ref": item["ref"]}]},
        "reason": {"decision": "deny", "items": [item], "reason": MARK * 200},
        "reason NUL": {"decision": "deny", "items": [item], "reason": MARK + "\x00"},
        "expiry": {"decision": "approve", "items": [item], "expires_in": -1},
    }
    with serving(world, QUIET) as server, _client(server.base, world, "bob") as http:
        got = {k: http.post("/api/answers", json=v) for k, v in bad.items()}
        nan = http.post("/api/answers", content=json.dumps(
            {"decision": "approve", "items": [item], "expires_in": float("nan")}),
            headers={"Content-Type": "application/json"})
        # the single route's reason is the same type: PostgreSQL holds no NUL in text
        single = http.post(f"/api/calls/{item['ref']}/deny",
                           json={"args_hash": item["args_hash"], "reason": "a\x00b"})
    assert single.status_code == 422 and single.json()["detail"][0]["loc"] == [
        "body", "reason"]
    assert {k: r.status_code for k, r in got.items()} == dict.fromkeys(bad, 422)
    assert nan.status_code == 422
    errors = {k: r.json()["detail"] for k, r in got.items()}
    assert errors["too many"][0]["loc"] == ["body", "items"]
    assert errors["twice"] == [{"loc": ["body", "items"], "type": "duplicate_ref",
                                "msg": "items[2] names the same ref as items[0]: "
                                       "name each call once"}]
    assert errors["hash"][0]["loc"] == ["body", "items", "1", "args_hash"]
    assert errors["ref huge"][0]["loc"] == ["body", "items", "0", "ref"]
    assert errors["missing"][0]["loc"] == ["body", "items", "0", "args_hash"]
    assert all(MARK not in r.text and "\\u0000" not in r.text for r in got.values())
    # nothing was answered, and nothing but the refused body happened
    assert _states(world, "t1", "mail-1") == ["awaiting_approval"]
    with Ledger(world.url) as ledger:
        assert ledger.call_details("t1", "mail-1").approvals == ()  # type: ignore[union-attr]


def test_an_attacker_gains_nothing_past_a_single_answer(db_url: str, tmp_path: Path) -> None:
    """Another tool's calls, one's own task's calls, refs past every row, and one ref
    repeated to count a quorum twice: each refused as the single route refuses it."""
    quorum = POLICY.replace(REFUND_REASON,
                            REFUND_REASON + "        approval: {approvers: {min: 2}}\n")
    world = build_world(db_url, tmp_path, quorum, {
        "carol": {"approve": ["refund"]}, "alice": {"approve": ["*"]}}, body="Dear Ana")
    assert world.call("q", "r-1", "refund", {"order": "o-1", "cents": 9},
                      principal="dave") == "awaiting_approval"
    mail = _item(world, "t1", "mail-1")  # a task acting for alice
    refund = _item(world, "q", "r-1")
    with serving(world, QUIET) as server:
        with _client(server.base, world, "carol") as http:
            before = _seq(world)
            others = http.post("/api/answers", json={"decision": "approve", "items": [mail]})
            twice = http.post("/api/answers", json={"decision": "approve",
                                                    "items": [refund, refund]})
            once = http.post("/api/answers", json={"decision": "approve", "items": [refund]})
            again = http.post("/api/answers", json={"decision": "approve", "items": [refund]})
            past = http.post("/api/answers", json={"decision": "deny", "items": [
                {"ref": 2**31, "args_hash": "a" * 64}]})
        with _client(server.base, world, "alice") as http:
            own = http.post("/api/answers", json={"decision": "approve", "items": [mail]})
    assert [(r["status"], r["error"]) for r in others.json()["results"]] == [
        (403, "OperatorRefused")]
    assert [(r["status"], r["error"]) for r in own.json()["results"]] == [
        (403, "ApprovalRefused")]
    assert "principal" in own.json()["results"][0]["detail"]
    assert (twice.status_code, past.status_code) == (422, 422)
    assert once.json()["answered"] == again.json()["answered"] == 1
    # carol's approval counts once: the refund still waits for a second person
    with Ledger(world.url) as ledger:
        approvals = ledger.call_details("q", "r-1").approvals  # type: ignore[union-attr]
    assert [a.decided_by for a in approvals] == ["carol"]
    assert _states(world, "q", "r-1") == ["awaiting_approval"]
    assert _states(world, "t1", "mail-1") == ["awaiting_approval"]
    refusals = [(e.actor, e.call_id, e.event) for e in _since(world, before)
                if e.event in ("operator_approve", "approval_refused")]
    assert refusals == [("operator:carol", "mail-1", "operator_approve"),
                        ("operator:alice", "mail-1", "approval_refused")]
