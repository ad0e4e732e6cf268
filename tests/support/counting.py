"""A write tool that counts its runs in the test's own process: the ground truth for
"ran exactly once" in the connection-loss and prepared-statement tests."""

from __future__ import annotations

from typing import Any

from agent_gate import ToolRegistry


def counting_tools(ran: list[str]) -> ToolRegistry:
    """``post`` (a write, not retry-safe) appends its ``text`` to ``ran`` each run."""
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write", idempotency="none", name="post")
    def post(text: str) -> dict[str, Any]:
        ran.append(text)
        return {"posted": text}

    return tools
