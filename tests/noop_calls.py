"""A no-op tool that logs its runs, and calls of it through a gate: the workload of
the tests that count what one call costs the ledger (round trips, statements)."""

from __future__ import annotations

from typing import Any

from agent_gate import CallState, Gate, ToolRegistry


def noop_tools(ran: list[int]) -> ToolRegistry:
    """``noop(n)``, a write that is not retry-safe: appends ``n`` to ``ran`` each run."""
    tools = ToolRegistry()

    def noop(n: int) -> dict[str, Any]:
        ran.append(n)
        return {"ok": n}

    tools.register(noop, schema={"type": "object", "properties": {"n": {"type": "integer"}}},
                   effect="write", idempotency="none")
    return tools


def run_calls(gate: Gate, task: str, first: int, count: int) -> None:
    """Calls ``c{first}`` ... of ``task``, each new and succeeding."""
    for n in range(first, first + count):
        out = gate.execute(task, {"call_id": f"c{n}", "name": "noop", "arguments": {"n": n}})
        assert out.state is CallState.SUCCEEDED and not out.replayed


def on_tool_calls(sql: str) -> str | None:
    """What a statement does to ``tool_calls``: ``INSERT``, ``UPDATE`` or None."""
    for kind in ("INSERT INTO tool_calls ", "UPDATE tool_calls "):
        if kind in sql:
            return kind.split()[0]
    return None
