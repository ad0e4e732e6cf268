"""A tool call as a test hands it to the gate, and a tool set that counts its runs."""

from __future__ import annotations

from typing import Any

from agent_gate import ToolRegistry


def call(call_id: str, name: str = "send", **arguments: Any) -> dict[str, Any]:
    """The mapping ``Gate.execute`` takes (the shape a provider adapter hands over)."""
    return {"call_id": call_id, "name": name, "arguments": arguments}


class Counting:
    """One write tool, ``send``; ``runs`` is its side effect (how often it really ran)."""

    def __init__(self) -> None:
        self.runs = 0
        self.tools = ToolRegistry()

        @self.tools.tool(schema={"type": "object"}, effect="write")
        def send(**_kw: Any) -> str:
            self.runs += 1
            return "sent"
