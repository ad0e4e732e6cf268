"""Gate.execute: record, validate, authorize, claim, run once; replay the stored outcome."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

from agent_gate import (
    CallInfo,
    CallState,
    Decision,
    Gate,
    GateUsageError,
    OutcomeUnknown,
    ToolRegistry,
    ToolSpec,
    Verdict,
    current_call,
)
from agent_gate.calls import CallStatus, ToolCall
from agent_gate.ledger import Event, NewCall

MAIL = {
    "type": "object",
    "properties": {
        "to": {"type": "string", "format": "email"},
        "subject": {"type": "string"},
        "body": {"type": "string"},
    },
    "required": ["to", "subject"],
    "additionalProperties": False,
}


class Recorder:
    """Tools that count their own invocations; the count is the side effect."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.keys: list[str] = []
        self.tools = ToolRegistry()

        @self.tools.tool(schema=MAIL, effect="write", dedupe=["to", "subject"])
        def send(to: str, subject: str, body: str = "") -> dict[str, Any]:
            self.calls["send"] += 1
            return {"message_id": f"m{self.calls['send']}", "to": to}

        @self.tools.tool(schema={"type": "object"}, effect="read")
        def lookup(**kw: Any) -> str:
            self.calls["lookup"] += 1
            return "plain text result"

        @self.tools.tool(schema={"type": "object"}, effect="write", idempotency="key")
        def charge(**kw: Any) -> str:
            self.calls["charge"] += 1
            key = current_call().idempotency_key
            self.keys.append(key)
            if self.calls["charge"] == 1:
                raise OutcomeUnknown("connection reset after the request was sent")
            return key

        @self.tools.tool(schema={"type": "object"}, effect="write")
        def explode(**kw: Any) -> None:
            self.calls["explode"] += 1
            raise RuntimeError(
                f"refused {kw.get('account')} with Authorization: Bearer sk-live-abcdef1234567890"
                + " while retrying" * 100
            )

        @self.tools.tool(schema={"type": "object"}, effect="write")
        def unsure(**kw: Any) -> None:
            self.calls["unsure"] += 1
            raise OutcomeUnknown("timed out waiting for the bank")

        @self.tools.tool(schema={"type": "object"}, effect="write", idempotency="natural")
        def put(**kw: Any) -> str:
            self.calls["put"] += 1
            if self.calls["put"] == 1:
                raise OutcomeUnknown("lost the response")
            return "stored"


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture
def gate(rec: Recorder, db_url: str) -> Gate:
    with Gate(rec.tools, db_url) as gate:
        yield gate


def mail(call_id: str = "c1", **args: Any) -> dict[str, Any]:
    arguments = {"to": "ana@example.com", "subject": "Invoice", "body": "Hello"} | args
    return {"call_id": call_id, "name": "send", "arguments": arguments}


def test_first_run_executes_and_replays_return_the_stored_outcome(
    gate: Gate, rec: Recorder
) -> None:
    first = gate.execute("task", mail())
    assert first.state is CallState.SUCCEEDED and first.ok and not first.replayed
    assert first.result == {"message_id": "m1", "to": "ana@example.com"}
    assert first.attempt == 1
    for _ in range(3):
        again = gate.execute("task", mail())
        assert again.replayed and again.state is CallState.SUCCEEDED
        assert again.result == first.result
    assert rec.calls["send"] == 1


def test_key_order_and_whitespace_do_not_make_a_different_call(
    gate: Gate, rec: Recorder
) -> None:
    gate.execute("task", {"call_id": "c1", "name": "lookup",
                          "arguments": '{"a": 1, "b": [1, 2]}'})
    again = gate.execute("task", {"call_id": "c1", "name": "lookup",
                                  "arguments": {"b": [1, 2], "a": 1}})
    assert again.replayed and again.state is CallState.SUCCEEDED
    assert rec.calls["lookup"] == 1


def test_same_call_id_with_other_arguments_is_a_conflict(gate: Gate, rec: Recorder) -> None:
    gate.execute("task", mail())
    conflict = gate.execute("task", mail(subject="Another"))
    assert conflict.state is CallState.REJECTED and conflict.code == "conflict"
    assert "different arguments" in (conflict.reason or "") and "not run" in conflict.reason
    assert not conflict.replayed and conflict.attempt == 0
    other_tool = gate.execute("task", {"call_id": "c1", "name": "lookup", "arguments": {}})
    assert other_tool.code == "conflict" and "a different tool" in (other_tool.reason or "")
    assert rec.calls == Counter({"send": 1})
    # The original outcome is untouched.
    stored = gate.execute("task", mail())
    assert stored.state is CallState.SUCCEEDED and stored.replayed


def test_dedupe_catches_the_same_write_under_a_new_call_id(gate: Gate, rec: Recorder) -> None:
    gate.execute("task", mail("c1"))
    regenerated = gate.execute("task", mail("c2"))
    assert regenerated.call_id == "c2" and regenerated.duplicate_of == "c1"
    assert regenerated.replayed and regenerated.state is CallState.SUCCEEDED
    changed_body = gate.execute("task", mail("c3", body="Hello again"))
    assert changed_body.code == "conflict" and "call 'c1'" in (changed_body.reason or "")
    other_subject = gate.execute("task", mail("c4", subject="Reminder"))
    assert other_subject.state is CallState.SUCCEEDED and not other_subject.replayed
    # Another task is another scope.
    assert not gate.execute("other-task", mail("c1")).replayed
    assert rec.calls["send"] == 3


@pytest.mark.parametrize(
    ("call", "state", "code", "reason"),
    [
        ({"call_id": "u", "name": "drop_db", "arguments": {}}, "rejected", "unknown_tool",
         "no tool named 'drop_db' is registered; not run"),
        (mail("s", to="not-an-address", extra="x"), "rejected", "schema_invalid",
         "the arguments fail the schema of 'send' at / (additionalProperties); "
         "/to (format); not run"),
        ({"call_id": "a", "name": "send", "arguments": ["ana@example.com"]}, "rejected",
         "arguments_not_object", "the arguments are a JSON array, not an object; not run"),
        ({"call_id": "j", "name": "send", "arguments": '{"to": "ana@'}, "rejected",
         "arguments_not_object", "the arguments are not valid JSON; not run"),
        # Text handed in directly is parsed as strictly as a stream's: with two
        # members of one name, the schema and the tool could each see a different one.
        ({"call_id": "d", "name": "send",
          "arguments": '{"to": "ana@example.com", "to": "eve@example.net"}'}, "rejected",
         "arguments_not_object", "the arguments are not valid JSON (duplicate_key); not run"),
        ({"call_id": "t", "name": "send", "arguments": '["ana@example.com"]'}, "rejected",
         "arguments_not_object", "the arguments are a JSON array, not an object; not run"),
        ({"call_id": "i", "name": "send", "arguments": '{"to": "ana@', "status": "incomplete",
          "reason": "max_output_tokens"}, "incomplete", "arguments_incomplete",
         "the arguments never completed (max_output_tokens); not run"),
        ({"call_id": "n", "name": "lookup", "arguments": {"x": float("nan")}}, "rejected",
         "arguments_not_json", "the arguments are not JSON data (NaN, Infinity, non-string "
         "keys or other objects); not run"),
        ({"call_id": "r", "name": "send", "arguments": None, "status": "rejected",
          "reason": "arguments_mismatch"}, "rejected", "stream_rejected",
         "the stream delivered this call unusably (arguments_mismatch); not run"),
    ],
)
def test_calls_that_may_never_run(
    gate: Gate, rec: Recorder, call: dict[str, Any], state: str, code: str, reason: str
) -> None:
    outcome = gate.execute("task", call)
    assert (outcome.state.value, outcome.code, outcome.reason) == (state, code, reason)
    assert outcome.ran is False and not outcome.replayed
    again = gate.execute("task", call)
    assert again.replayed and again.state.value == state and again.reason == reason
    assert sum(rec.calls.values()) == 0
    # The tool result tells the model plainly that nothing ran.
    block = outcome.to_anthropic()
    assert block["is_error"] is True and '"executed": false' in block["content"]


def test_schema_reason_never_contains_argument_values(gate: Gate, db_url: str) -> None:
    secret = "p4ssw0rd-in-a-recipient-field"
    outcome = gate.execute("task", mail("s", to=secret))
    assert outcome.code == "schema_invalid"
    assert secret not in (outcome.reason or "")
    audit = gate.ledger.audit("task")
    assert all(secret not in str(a.detail) for a in audit)


def test_a_tool_that_raises_is_failed_with_a_bounded_scrubbed_error(
    gate: Gate, rec: Recorder, db_url: str
) -> None:
    outcome = gate.execute("task", {"call_id": "e", "name": "explode",
                                    "arguments": {"account": "ACCT-998877"}})
    assert outcome.state is CallState.FAILED and outcome.code == "tool_error"
    assert outcome.reason == "the tool raised RuntimeError"
    assert isinstance(outcome.exception, RuntimeError)
    error = outcome.error
    assert error is not None and error["type"] == "RuntimeError"
    message = error["message"]
    assert "ACCT-998877" not in message and "sk-live" not in message
    assert "refused <argument> with Authorization: <redacted>" in message
    assert len(message) < 600 and message.endswith("more chars]")
    replay = gate.execute("task", {"call_id": "e", "name": "explode",
                                   "arguments": {"account": "ACCT-998877"}})
    assert replay.replayed and replay.error == error
    assert rec.calls["explode"] == 1
    # Neither the secret nor the argument value reached the database in the error.
    with gate.ledger.engine.connect() as conn:
        stored_error = conn.exec_driver_sql(
            "SELECT error FROM tool_calls WHERE call_id='e'"
        ).scalar_one()
    assert "sk-live" not in stored_error and "ACCT-998877" not in stored_error


def test_outcome_unknown_is_in_doubt_and_never_rerun_for_idempotency_none(
    gate: Gate, rec: Recorder
) -> None:
    call = {"call_id": "u1", "name": "unsure", "arguments": {}}
    first = gate.execute("task", call)
    assert first.state is CallState.IN_DOUBT and first.code == "outcome_unknown"
    assert first.ran is None and not first.replayed
    for outcome in (gate.execute("task", call), *gate.recover("task")):
        assert outcome.state is CallState.IN_DOUBT and outcome.replayed
    assert rec.calls["unsure"] == 1
    text = first.to_openai_responses()["output"]
    assert '"executed": "unknown"' in text and "Do not assume it succeeded" in text


def test_natural_tools_in_doubt_run_again_once(gate: Gate, rec: Recorder) -> None:
    call = {"call_id": "p1", "name": "put", "arguments": {"k": 1}}
    assert gate.execute("task", call).state is CallState.IN_DOUBT
    rerun = gate.execute("task", call)
    assert rerun.state is CallState.SUCCEEDED and not rerun.replayed and rerun.attempt == 2
    assert gate.execute("task", call).replayed
    assert rec.calls["put"] == 2
    events = [a.event for a in gate.ledger.audit("task") if a.call_id == "p1"]
    assert events == ["received", "allow", "claim", "lose", "seen_again", "retry", "claim",
                      "succeed", "seen_again"]


def test_key_tools_get_a_stable_idempotency_key_across_attempts(
    gate: Gate, rec: Recorder
) -> None:
    call = {"call_id": "k1", "name": "charge", "arguments": {"amount": 5}}
    assert gate.execute("task", call).state is CallState.IN_DOUBT
    done = gate.recover("task")
    assert [o.state for o in done] == [CallState.SUCCEEDED]
    assert rec.keys[0] == rec.keys[1] == done[0].result
    assert rec.keys[0].startswith("ag-")
    # Another call gets another key.
    gate.execute("task", {"call_id": "k2", "name": "charge", "arguments": {"amount": 5}})
    assert rec.keys[2] != rec.keys[0]


def test_current_call_outside_a_tool_is_an_error() -> None:
    with pytest.raises(GateUsageError, match="only available inside a tool"):
        current_call()


def test_a_call_running_elsewhere_is_in_progress_and_not_started(db_url: str) -> None:
    started, release = threading.Event(), threading.Event()
    count = Counter[str]()
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write")
    def slow() -> str:
        count["slow"] += 1
        started.set()
        assert release.wait(10)
        return "done"

    call = {"call_id": "s1", "name": "slow", "arguments": {}}
    with Gate(tools, db_url) as gate:
        results: list[Any] = []
        worker = threading.Thread(target=lambda: results.append(gate.execute("t", call)))
        worker.start()
        assert started.wait(10)
        during = gate.execute("t", call)
        assert during.state is CallState.EXECUTING and during.code == "in_progress"
        assert during.replayed and "not started again" in (during.reason or "")
        assert [o.state for o in gate.recover("t")] == [CallState.EXECUTING]
        release.set()
        worker.join(10)
        assert results[0].state is CallState.SUCCEEDED
    assert count["slow"] == 1


def test_lease_is_renewed_while_the_tool_runs(db_url: str) -> None:
    """The owner keeps pushing its lease out while the tool runs, so nobody judges
    the call lost. The lease is long enough (2 s, renewed every ~0.7 s) that a busy
    machine cannot let it lapse between renewals; the tool waits for three renewals
    (bounded), never for a fixed time."""
    seen: list[int] = []
    tools = ToolRegistry()

    with Gate(tools, db_url, lease_seconds=2.0) as gate:

        @tools.tool(schema={"type": "object"}, effect="write")
        def long_running() -> str:
            deadline = time.monotonic() + 20
            while len(seen) < 4 and time.monotonic() < deadline:
                row = gate.ledger.get("t", "l1")
                assert row is not None and row.lease_expires_ms is not None
                if not seen or row.lease_expires_ms != seen[-1]:
                    seen.append(row.lease_expires_ms)
                    # Nobody may judge it lost while it runs: the lease keeps moving.
                    assert gate.recover("t")[0].state is CallState.EXECUTING
                time.sleep(0.05)
            return "ok"

        outcome = gate.execute("t", {"call_id": "l1", "name": "long_running", "arguments": {}})
    assert outcome.state is CallState.SUCCEEDED
    assert len(seen) == 4
    assert all(b > a for a, b in itertools.pairwise(seen))


def test_expired_lease_of_a_worker_on_another_host_becomes_in_doubt(db_url: str) -> None:
    count = Counter[str]()
    tools = ToolRegistry()
    tools.register(lambda: count.update(["w"]), name="w", schema={"type": "object"},
                   effect="write")
    owner = "elsewhere:4242:1:abc"
    with Gate(tools, db_url) as gate:
        # A worker on another machine claimed it: only its lease expiry can tell.
        rec0, _ = gate.ledger.record(
            NewCall("t", "x1", "call:x1", "w", "write", "none", "h", {})
        )
        auth = gate.ledger.transition(rec0, Event.ALLOW).record
        claimed = gate.ledger.claim(auth, owner=owner, lease_ms=60_000).record
        running = gate.recover("t")
        assert [o.state for o in running] == [CallState.EXECUTING]  # lease still valid
        # Its last renewal gave it a millisecond; it never renews again.
        assert gate.ledger.renew(claimed, owner=owner, lease_ms=1)
        swept = wait_until(
            lambda: (o := gate.recover("t")[0]).state is not CallState.EXECUTING and o,
            30, what="the lease to expire",
        )
        assert swept.state is CallState.IN_DOUBT and swept.code == "lease_expired"
        assert "lease expired" in (swept.reason or "")
    assert count["w"] == 0


def test_sync_tool_timeout_is_in_doubt_then_settled_by_the_late_result(db_url: str) -> None:
    release = threading.Event()
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write", timeout=0.2)
    def sluggish() -> str:
        assert release.wait(10)
        return "finally"

    @tools.tool(schema={"type": "object"}, effect="read", timeout=0.2)
    def slow_read() -> str:
        time.sleep(1)  # a tool that outlasts its timeout: the time taken is what is tested
        return "late"

    with Gate(tools, db_url) as gate:
        outcome = gate.execute("t", {"call_id": "t1", "name": "sluggish", "arguments": {}})
        assert outcome.state is CallState.IN_DOUBT and outcome.code == "timeout"
        assert "did not return within 0.2s" in (outcome.reason or "")
        release.set()
        row = wait_until(
            lambda: (r := gate.ledger.get("t", "t1")) and r.state is not CallState.IN_DOUBT and r,
            10, what="the late result to settle the call",
        )
        assert row.state is CallState.SUCCEEDED
        assert row.reason_code == "late_outcome" and row.result == "finally"

        read = gate.execute("t", {"call_id": "t2", "name": "slow_read", "arguments": {}})
        assert read.state is CallState.FAILED and read.code == "timeout"


def test_async_tools(db_url: str) -> None:
    count = Counter[str]()
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write")
    async def aw(**kw: Any) -> str:
        count["aw"] += 1
        await asyncio.sleep(0)
        return current_call().call_id

    @tools.tool(schema={"type": "object"}, effect="write", timeout=0.1)
    async def hangs() -> None:
        await asyncio.sleep(5)  # outlasts its 0.1 s timeout: the hang is what is tested

    with Gate(tools, db_url) as gate:
        # Without a running loop, execute runs an async tool to completion itself.
        assert gate.execute("t", {"call_id": "a1", "name": "aw", "arguments": {}}).result == "a1"

        async def main() -> None:
            with pytest.raises(GateUsageError, match="use aexecute"):
                gate.execute("t", {"call_id": "a2", "name": "aw", "arguments": {}})
            assert gate.ledger.get("t", "a2").state is CallState.AUTHORIZED  # not claimed
            done = await gate.aexecute("t", {"call_id": "a2", "name": "aw", "arguments": {}})
            assert done.state is CallState.SUCCEEDED and done.result == "a2"
            again = await gate.aexecute("t", {"call_id": "a2", "name": "aw", "arguments": {}})
            assert again.replayed
            timed = await gate.aexecute("t", {"call_id": "h", "name": "hangs", "arguments": {}})
            assert timed.state is CallState.IN_DOUBT and timed.code == "timeout"

        asyncio.run(main())
    assert count["aw"] == 2


def test_aexecute_runs_sync_tools_off_the_loop(db_url: str) -> None:
    loop_threads: set[int] = set()
    tool_threads: set[int] = set()
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="read")
    def where() -> str:
        tool_threads.add(threading.get_ident())
        return "ok"

    async def main(gate: Gate) -> None:
        loop_threads.add(threading.get_ident())
        await gate.aexecute("t", {"call_id": "w", "name": "where", "arguments": {}})

    with Gate(tools, db_url) as gate:
        asyncio.run(main(gate))
    assert tool_threads and not (tool_threads & loop_threads)


class Policy:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def authorize(self, task_id: str, call: CallInfo, spec: ToolSpec) -> Decision:
        self.asked.append(call.call_id)
        if call.tool == "lookup":
            return Decision(Verdict.ALLOW, rule_ids=("reads",), policy_hash="ph1")
        if call.arguments and call.arguments.get("to", "").endswith("@example.com"):
            return Decision(Verdict.APPROVE, "external mail needs approval", ("mail-approve",))
        return Decision(Verdict.DENY, "recipient not allowed", ("mail-deny",), "ph1")


def test_policy_decisions(rec: Recorder, db_url: str) -> None:
    policy = Policy()
    with Gate(rec.tools, db_url, policy=policy) as gate:
        allowed = gate.execute("t", {"call_id": "l", "name": "lookup", "arguments": {}})
        assert allowed.state is CallState.SUCCEEDED
        waiting = gate.execute("t", mail("m1"))
        assert waiting.state is CallState.AWAITING_APPROVAL
        assert waiting.reason == "external mail needs approval" and waiting.ran is False
        denied = gate.execute("t", mail("m2", to="eve@evil.test", subject="x"))
        assert denied.state is CallState.REJECTED and denied.code == "policy_denied"
        assert denied.reason == "denied by policy: recipient not allowed; not run"
        assert gate.execute("t", mail("m1")).state is CallState.AWAITING_APPROVAL
        bad = gate.execute("t", mail("m3", to="nope"))
        assert bad.code == "schema_invalid"  # validated before the policy is asked
        audit = {a.call_id: a.detail for a in gate.ledger.audit("t") if a.event == "reject"}
        assert audit["m2"]["rule_ids"] == ["mail-deny"] and audit["m2"]["policy_hash"] == "ph1"
    assert policy.asked == ["l", "m1", "m2"]  # once per call, never on replay
    assert rec.calls == Counter({"lookup": 1})


def test_large_results_replay_as_omitted(rec: Recorder, db_url: str) -> None:
    tools = ToolRegistry()
    tools.register(lambda: {"blob": "x" * 1000}, name="big", schema={"type": "object"})
    with Gate(tools, db_url, max_result_bytes=100) as gate:
        first = gate.execute("t", {"call_id": "b", "name": "big", "arguments": {}})
        assert first.result == {"blob": "x" * 1000} and not first.result_omitted
        again = gate.execute("t", {"call_id": "b", "name": "big", "arguments": {}})
        assert again.replayed and again.result is None and again.result_omitted
        assert "too large to keep" in again.tool_output()


def test_tool_call_objects_from_the_accumulator(gate: Gate, rec: Recorder) -> None:
    call = ToolCall(call_id="tc", name="send", status=CallStatus.COMPLETE,
                    arguments={"to": "ana@example.com", "subject": "S"},
                    raw_arguments='{"to":"ana@example.com","subject":"S"}', provider="anthropic")
    assert gate.execute("task", call).state is CallState.SUCCEEDED
    custom = ToolCall(call_id="cu", name="send", status=CallStatus.COMPLETE,
                      raw_arguments="free text", kind="custom")
    refused = gate.execute("task", custom)
    assert refused.code == "arguments_not_object" and "free text" in (refused.reason or "")
    provider_ran = ToolCall(call_id="pe", name="web_search", status=CallStatus.PROVIDER_EXECUTED)
    with pytest.raises(GateUsageError, match="executed by the provider"):
        gate.execute("task", provider_ran)
    with pytest.raises(GateUsageError, match="needs 'name'"):
        gate.execute("task", {"call_id": "x"})
    assert rec.calls["send"] == 1


def test_renderers(gate: Gate) -> None:
    ok = gate.execute("task", {"call_id": "r1", "name": "lookup", "arguments": {}})
    assert ok.to_openai_responses() == {"type": "function_call_output", "call_id": "r1",
                                        "output": "plain text result"}
    assert ok.to_openai_chat() == {"role": "tool", "tool_call_id": "r1",
                                   "content": "plain text result"}
    assert ok.to_anthropic() == {"type": "tool_result", "tool_use_id": "r1",
                                 "content": "plain text result", "is_error": False}
    assert ok.to_gemini()["functionResponse"]["response"] == {"result": "plain text result"}
    sent = gate.execute("task", mail("r2"))
    assert sent.to_openai_chat()["content"] == '{"message_id": "m1", "to": "ana@example.com"}'
    unknown = gate.execute("task", {"call_id": "r3", "name": "nope", "arguments": {}})
    gemini = unknown.to_gemini()["functionResponse"]
    assert gemini["name"] == "nope" and gemini["response"]["error"]["status"] == "rejected"
    from agent_gate import render_tool_result

    assert render_tool_result(unknown, "openai-chat") == unknown.to_openai_chat()
    with pytest.raises(GateUsageError, match="no tool-result format"):
        render_tool_result(unknown, "carrier-pigeon")


def test_calls_lists_the_task(gate: Gate) -> None:
    gate.execute("task", mail("a"))
    gate.execute("task", {"call_id": "b", "name": "nope", "arguments": {}})
    listed = gate.calls("task")
    assert [(o.call_id, o.state.value, o.replayed) for o in listed] == [
        ("a", "succeeded", True), ("b", "rejected", True)]


def test_gate_on_a_file_path_relative_default(
    rec: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENT_GATE_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    with Gate(rec.tools, create=True) as gate:
        gate.execute("t", mail())
    assert (tmp_path / "agent_gate.db").exists()


def test_a_call_whose_decision_raises_stays_recorded_as_received(db_url: str) -> None:
    """Deciding commits with the insert; when deciding itself fails (here a model
    validator with a bug), the call is still recorded, as ``received``, and the
    error reaches the caller: a resume decides it later."""
    from pydantic import BaseModel, field_validator

    class Order(BaseModel):
        sku: str

        @field_validator("sku")
        @classmethod
        def buggy(cls, value: str) -> str:
            raise RuntimeError("validator bug")

    tools = ToolRegistry()
    ran: list[Order] = []
    tools.register(ran.append, name="order", schema=Order, effect="write")
    with Gate(tools, db_url) as gate:
        with pytest.raises(RuntimeError, match="validator bug"):
            gate.execute("t", {"call_id": "c1", "name": "order", "arguments": {"sku": "A-1"}})
        stored = gate.ledger.get("t", "c1")
        assert stored is not None and stored.state is CallState.RECEIVED
        assert [e.event for e in gate.ledger.audit("t") if e.call_id == "c1"] == ["received"]
    assert ran == []
