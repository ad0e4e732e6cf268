"""``GatedSession`` (the client side) and the proxy's user approval through elicitation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as mt
import pytest
from mcp import ClientSession, stdio_client
from mcp.client.session import ClientRequestContext
from mcp_harness import POLICY, Setup

from agent_gate import Gate, ToolRegistry
from agent_gate.integrations.mcp import CALL_ID_META, GatedSession
from agent_gate.ledger import Ledger


def text(result: Any) -> str:
    return " ".join(c.text for c in result.content if c.type == "text")


@asynccontextmanager
async def gated_session(
    setup: Setup, **options: Any
) -> AsyncIterator[tuple[ClientSession, GatedSession]]:
    """A session with the real upstream, and that session gated in task ``s``."""
    async with (
        stdio_client(setup.upstream()) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        with Gate(ToolRegistry(), setup.db, policy=POLICY, create=True) as gate:
            yield session, GatedSession(session, gate, task_id="s", **options)


@pytest.mark.slow
def test_a_gated_session_runs_writes_once_denies_and_waits(tmp_path: Path) -> None:
    setup = Setup(tmp_path)

    async def main() -> None:
        async with gated_session(setup) as (session, gated):
            gate = gated.calls.gate
            # Not listed first: the tools are registered on the first call.
            one = await gated.call_tool("append_note", {"text": "a"})
            two = await gated.call_tool("append_note", {"text": "a"})
            assert text(one) == text(two) == "appended, 1 lines"
            assert gate.tools["append_note"].spec.effect.value == "write"
            assert "wipe" in {t.name for t in (await gated.list_tools()).tools}
            denied = await gated.call_tool("wipe", {"target": "x"})
            assert denied.is_error and "never-wipe" in text(denied)
            waiting = await gated.call_tool("send_payment", {"to": "al", "cents": 3000},
                                            meta={CALL_ID_META: "pay-al"})
            assert waiting.is_error and (waiting.meta or {})["agent-gate/call-id"] == "pay-al"
            gate.approve("pay-al", by="ana", task_id="s")
            paid = await gated.call_tool("send_payment", {"to": "al", "cents": 3000},
                                         meta={CALL_ID_META: "pay-al"})
            assert not paid.is_error and text(paid) == "paid, 2 lines"
            assert gated.server_capabilities is session.server_capabilities  # delegated

    anyio.run(main)
    assert setup.lines() == ["note:a", "pay:al:3000"]
    with Ledger(setup.db) as ledger:
        assert ledger.verify_audit().ok


@pytest.mark.slow
@pytest.mark.parametrize("answer, ran", [(True, True), (False, False)])
def test_the_user_approves_through_elicitation_when_the_policy_lets_them(
    tmp_path: Path, answer: bool, ran: bool
) -> None:
    policy = tmp_path / "self-approval.yaml"
    policy.write_text(POLICY.read_text("utf-8").replace(
        "  send_payment:\n", "  send_payment:\n    approvers:\n      self_approval: true\n"
    ), "utf-8")
    setup = Setup(tmp_path, policy)
    asked: list[str] = []

    async def elicit(
        context: ClientRequestContext, params: mt.ElicitRequestParams
    ) -> mt.ElicitResult:
        asked.append(params.message)
        return mt.ElicitResult(action="accept", content={"approve": answer})

    async def main() -> None:
        async with setup.proxy("--task", "t", "--principal", "ana", elicitation=elicit) as client:
            result = await client.call_tool("send_payment", {"to": "bo", "cents": 4000})
            assert result.is_error is not ran
            state = (result.meta or {})["agent-gate/state"]
            assert state == ("succeeded" if ran else "rejected")

    anyio.run(main)
    assert len(asked) == 1 and "send_payment" in asked[0]
    assert setup.lines() == (["pay:bo:4000"] if ran else [])


@pytest.mark.slow
def test_a_gated_session_takes_a_dedupe_key_and_records_a_reported_error_as_failed(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path)

    async def main() -> None:
        async with gated_session(setup, dedupe={"append_note": ["text"]}) as (_, gated):
            one = await gated.call_tool("append_note", {"text": "n"},
                                        meta={CALL_ID_META: "first"})
            two = await gated.call_tool("append_note", {"text": "n"},
                                        meta={CALL_ID_META: "second"})
            assert text(one) == text(two) == "appended, 1 lines"
            assert (two.meta or {})["agent-gate/duplicate-of"] == "first"
            declined = await gated.call_tool("charge_card", {"card": "c-1", "cents": 5})
            again = await gated.call_tool("charge_card", {"card": "c-1", "cents": 5})
            assert declined.is_error and again.is_error
            assert (again.meta or {})["agent-gate/state"] == "failed"

    anyio.run(main)
    assert setup.lines() == ["note:n", "charge:c-1:5"]
