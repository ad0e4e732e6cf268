"""A tool's reconcile hook, sync or async, answering or raising, through ``recover``
and ``arecover``: one body asks the hook for both loops, so each pairing is held here.

A call is put in doubt the cheap way (a write that outlasts its timeout), then a
recovery asks the hook. An answer settles the call; a hook that raises leaves it in
doubt with a ``reconcile_failed`` note naming only the exception's type.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agent_gate import CallInfo, CallState, Gate, Reconciled, Reconciliation, ToolRegistry

SECRET = "downstream-said-s3cr3t"


def _answers(info: CallInfo) -> Reconciled:
    return Reconciled(Reconciliation.SUCCEEDED, result={"found": info.call_id})


async def _answers_later(info: CallInfo) -> Reconciled:
    await asyncio.sleep(0)
    return _answers(info)


def _raises(info: CallInfo) -> Reconciled:
    raise ConnectionError(SECRET)


async def _raises_later(info: CallInfo) -> Reconciled:
    await asyncio.sleep(0)
    raise ConnectionError(SECRET)


HOOKS: dict[str, Callable[[CallInfo], Any]] = {
    "sync answers": _answers,
    "async answers": _answers_later,
    "sync raises": _raises,
    "async raises": _raises_later,
}


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # let the timed-out tool thread end


def _gate_with(hook: Callable[[CallInfo], Any], db_url: str, release: threading.Event) -> Gate:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write", timeout=0.05, reconcile=hook)
    def slow_write() -> str:
        assert release.wait(30)
        return "late"

    return Gate(tools, db_url)


@pytest.mark.parametrize("entry", ["recover", "arecover"])
@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_reconcile_hook_settles_or_leaves_in_doubt(
    hook: str, entry: str, db_url: str, release: threading.Event
) -> None:
    with _gate_with(HOOKS[hook], db_url, release) as gate:
        timed = gate.execute("t", {"call_id": "c1", "name": "slow_write", "arguments": {}})
        assert timed.state is CallState.IN_DOUBT and timed.code == "timeout"

        if entry == "recover":
            (recovered,) = gate.recover("t")
        else:
            (recovered,) = asyncio.run(gate.arecover("t"))

        notes = [a for a in gate.ledger.audit("t") if a.event == "reconcile_failed"]
        if hook.endswith("answers"):
            assert recovered.state is CallState.SUCCEEDED and recovered.code == "reconciled"
            assert recovered.result == {"found": "c1"}
            assert notes == []
        else:
            assert recovered.state is CallState.IN_DOUBT
            assert [n.detail.get("error_type") for n in notes] == ["ConnectionError"]
            assert all(SECRET not in repr(a) for a in gate.ledger.audit("t"))
