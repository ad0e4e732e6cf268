"""A tool that did its write is never run again because its result or error was odd.

Each tool here is declared retry-safe (``idempotency="natural"``), which is what
made the bug expensive: a result the ledger could not store left the call
``executing``, and every recovery ran the write again. The outcome must be
terminal at once, stored in a bounded safe form, and replayed as such.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from agent_gate import (
    CallInfo,
    CallState,
    Gate,
    OutcomeUnknown,
    Reconciled,
    Reconciliation,
    ToolRegistry,
    current_call,
    render_tool_result,
)
from agent_gate.privacy.scrub import MAX_ERROR_CHARS

PROVIDERS = ("openai-responses", "openai-chat", "anthropic", "gemini")


class Unprintable:
    """An object with no JSON form whose ``str`` (pydantic's fallback) raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text form")


def _deep(levels: int) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(levels):
        child: list[Any] = []
        node.append(child)
        node = child
    return root


ODD_RESULTS: dict[str, Callable[[], Any]] = {
    "nan": lambda: {"score": float("nan")},
    "infinity": lambda: float("inf"),
    "lone_surrogate": lambda: "sent \udc80 ok",
    "raw_bytes_not_utf8": lambda: b"\xff\xfe\x00raw",
    "str_raises": Unprintable,
    "huge_int": lambda: 10**5000,
    "too_deep": lambda: _deep(5000),
}


def counting_gate(db_url: str, result: Callable[[], Any]) -> tuple[Gate, Counter[str]]:
    ran: Counter[str] = Counter()
    tools = ToolRegistry()

    @tools.tool(name="write", schema={"type": "object"}, effect="write", idempotency="natural")
    def write(**kw: Any) -> Any:
        ran["write"] += 1
        return result()

    return Gate(tools, db_url), ran


def rendered(outcome: Any) -> list[str]:
    """Every form the model may read, each serializable as JSON (what an SDK sends)."""
    return [json.dumps(render_tool_result(outcome, p), ensure_ascii=False) for p in PROVIDERS]


@pytest.mark.parametrize("kind", list(ODD_RESULTS))
def test_an_unstorable_result_is_a_success_that_never_runs_again(
    db_url: str, kind: str
) -> None:
    gate, ran = counting_gate(db_url, ODD_RESULTS[kind])
    with gate:
        first = gate.execute("t", {"call_id": "c1", "name": "write", "arguments": {}})
        assert first.state is CallState.SUCCEEDED and not first.replayed
        assert first.code == "result_unstorable"
        stand_in = first.result["result_unstorable"]
        assert stand_in["type"] and set(stand_in) == {"type", "size", "sha256"}
        output = json.loads(first.tool_output())
        assert output["status"] == "succeeded" and output["executed"] is True
        assert output["result"] == first.result
        assert len(rendered(first)) == len(PROVIDERS)
        # Recovery and resume find nothing to do; the same call again is a replay.
        assert gate.recover("t") == []
        assert gate.resume("t") == []
        again = gate.execute("t", {"call_id": "c1", "name": "write", "arguments": {}})
        assert again.replayed and again.state is CallState.SUCCEEDED
        assert again.result == first.result and again.code == "result_unstorable"
        rendered(again)
    with Gate(gate.tools, db_url) as other:  # another worker, later
        assert other.recover() == []
        [stored] = other.calls("t")
        assert stored.state is CallState.SUCCEEDED and stored.result == first.result
    assert ran == Counter(write=1)


def test_the_stand_in_never_holds_the_value(db_url: str) -> None:
    secret = "sent \udc80 ACCOUNT-7781-2231"
    gate, _ = counting_gate(db_url, lambda: secret)
    with gate:
        outcome = gate.execute("t", {"call_id": "c", "name": "write", "arguments": {}})
        rec = gate.ledger.get("t", "c")
    assert rec is not None and rec.result == outcome.result
    text = json.dumps(rec.result) + outcome.tool_output() + (rec.reason or "")
    assert "ACCOUNT" not in text and "7781" not in text
    assert outcome.result["result_unstorable"]["size"] == len(secret)
    assert outcome.result["result_unstorable"]["sha256"].startswith("sha256:")


@pytest.mark.parametrize(
    "value", ["nul \x00 in text", {"k\x00ey": ["\x00"]}, "x" * 300_000],
    ids=["nul_text", "nul_key", "over_max_result_bytes"],
)
def test_nul_characters_and_big_results_are_stored_terminal(db_url: str, value: Any) -> None:
    """PostgreSQL refuses NUL in text; the ledger's JSON writes it escaped."""
    gate, ran = counting_gate(db_url, lambda: value)
    with gate:
        first = gate.execute("t", {"call_id": "c", "name": "write", "arguments": {}})
        assert first.state is CallState.SUCCEEDED and first.result == value
        assert gate.recover("t") == [] and gate.resume("t") == []
        [stored] = gate.calls("t")
    if stored.result_omitted:
        assert stored.result is None and "too large" in stored.tool_output()
    else:
        assert stored.result == value
    rendered(stored)
    assert ran == Counter(write=1)


class MessageRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("cannot describe myself")


LongNamedError = type("E" * 3000, (Exception,), {})

ODD_ERRORS: dict[str, Callable[[], BaseException]] = {
    "str_raises": MessageRaises,
    "lone_surrogate": lambda: ValueError("bad \ud800 input"),
    "nul": lambda: ValueError("bad \x00 input"),
    "huge_message": lambda: ValueError("y" * 5_000_000),
    "huge_type_name": lambda: LongNamedError("m"),
}


@pytest.mark.parametrize("kind", list(ODD_ERRORS))
def test_an_odd_exception_is_a_bounded_failure_that_never_runs_again(
    db_url: str, kind: str
) -> None:
    ran: Counter[str] = Counter()
    tools = ToolRegistry()

    @tools.tool(name="write", schema={"type": "object"}, effect="write", idempotency="natural")
    def write(**kw: Any) -> None:
        ran["write"] += 1
        raise ODD_ERRORS[kind]()

    with Gate(tools, db_url) as gate:
        first = gate.execute("t", {"call_id": "c", "name": "write", "arguments": {}})
        assert first.state is CallState.FAILED and first.code == "tool_error"
        assert first.error is not None
        assert len(first.error["message"]) <= MAX_ERROR_CHARS + 40
        assert len(first.error["type"]) <= 200 and len(first.reason or "") <= 1000
        rendered(first)
        assert gate.recover("t") == [] and gate.resume("t") == []
        again = gate.execute("t", {"call_id": "c", "name": "write", "arguments": {}})
        assert again.replayed and again.error == first.error
    assert ran == Counter(write=1)


def test_an_async_tool_with_an_unstorable_result_succeeds_once(db_url: str) -> None:
    ran: Counter[str] = Counter()
    tools = ToolRegistry()

    @tools.tool(name="write", schema={"type": "object"}, effect="write", idempotency="natural")
    async def write(**kw: Any) -> float:
        ran["write"] += 1
        return float("nan")

    async def main(gate: Gate) -> None:
        outcome = await gate.aexecute("t", {"call_id": "c", "name": "write", "arguments": {}})
        assert outcome.state is CallState.SUCCEEDED and outcome.code == "result_unstorable"
        assert await gate.arecover("t") == []

    with Gate(tools, db_url) as gate:
        asyncio.run(main(gate))
    assert ran == Counter(write=1)


def test_a_late_unstorable_result_settles_the_doubt_instead_of_a_rerun(db_url: str) -> None:
    """A write that outlived its timeout and then returned NaN: the late result is
    what settles the in-doubt call, so recovery has nothing to re-run."""
    ran: Counter[str] = Counter()
    release = threading.Event()
    tools = ToolRegistry()

    @tools.tool(
        name="slow_write", schema={"type": "object"}, effect="write", idempotency="natural",
        timeout=0.01,
    )
    def slow_write(**kw: Any) -> float:
        ran["slow_write"] += 1
        release.wait()
        return float("nan")

    with Gate(tools, db_url) as gate:
        first = gate.execute("t", {"call_id": "c", "name": "slow_write", "arguments": {}})
        assert first.state is CallState.IN_DOUBT and first.code == "timeout"
        [worker] = [t for t in threading.enumerate() if t.name == "agent-gate-slow_write"]
        release.set()
        worker.join()  # the late outcome is committed on the tool's thread
        [settled] = gate.calls("t")
        assert settled.state is CallState.SUCCEEDED and settled.code == "late_outcome"
        assert settled.result["result_unstorable"]["type"] == "float"
        assert gate.recover("t") == []
    assert ran == Counter(slow_write=1)


def test_odd_reconcile_answers_settle_their_call_and_spare_the_batch(db_url: str) -> None:
    """A reconcile hook's result and error are stored as a tool's are: one hook that
    answers NaN or a lone surrogate does not stop recovery of the calls after it."""
    answers = {
        "nan": Reconciled(Reconciliation.SUCCEEDED, result={"charged": float("nan")}),
        "surrogate": Reconciled(Reconciliation.FAILED, error="declined \ud800 by bank"),
        "plain": Reconciled(Reconciliation.SUCCEEDED, result={"charged": 12}),
    }
    ran: Counter[str] = Counter()
    tools = ToolRegistry()

    def look_up(info: CallInfo) -> Reconciled:
        return answers[info.call_id]

    @tools.tool(name="charge", schema={"type": "object"}, effect="write", reconcile=look_up)
    def charge(**kw: Any) -> None:
        ran[current_call().call_id] += 1
        raise OutcomeUnknown("connection reset after the request was sent")

    with Gate(tools, db_url) as gate:
        for call_id in answers:
            outcome = gate.execute("t", {"call_id": call_id, "name": "charge", "arguments": {}})
            assert outcome.state is CallState.IN_DOUBT
        settled = {o.call_id: o for o in gate.recover("t")}
        assert {k: o.state for k, o in settled.items()} == {
            "nan": CallState.SUCCEEDED, "surrogate": CallState.FAILED,
            "plain": CallState.SUCCEEDED,
        }
        assert settled["nan"].result["result_unstorable"]["type"] == "dict"
        assert settled["surrogate"].error == {
            "type": "Reconciled", "message": "declined \ufffd by bank"}
        assert settled["plain"].result == {"charged": 12}
        for outcome in settled.values():
            rendered(outcome)
        assert gate.recover("t") == []
    assert ran == Counter(nan=1, surrogate=1, plain=1)
