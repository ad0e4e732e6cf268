"""A small MCP server (the official SDK's ``MCPServer``) that ``mcp_proxy.py`` puts the gate in
front of. Each note is one line appended to the file ``$NOTES_FILE``: a second run of the
same write is a second line, which is what the gate prevents."""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("notes")
NOTES = Path(os.environ.get("NOTES_FILE", "notes.txt"))


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def add_note(text: str) -> str:
    """Append a note."""
    with NOTES.open("a", encoding="utf-8") as f:
        f.write(text + "\n")
    return f"noted: {text}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def list_notes() -> list[str]:
    """Every note so far."""
    return NOTES.read_text("utf-8").splitlines() if NOTES.exists() else []


@server.tool()
def delete_notes() -> str:
    """Delete every note (no annotations: destructive, by the MCP specification's default)."""
    NOTES.unlink(missing_ok=True)
    return "deleted"


if __name__ == "__main__":
    server.run("stdio")
