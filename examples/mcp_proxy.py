"""Put agent-gate in front of an MCP server: ``agent-gate mcp proxy``, driven by a real client.

The proxy starts ``mcp_notes_server.py`` (after ``--``) and serves its tools over stdio to any
MCP client, every ``tools/call`` checked against the server's own ``inputSchema`` and the
policy ``mcp_policy.yaml``, and recorded in the ledger. This script is that client (the
official SDK's ``ClientSession``): it adds the same note twice, lists the notes, and tries
to delete them. The note is written once, the second request answered from the ledger; the
deletion is denied and never reaches the server. An MCP client configured with the same
command (``agent-gate mcp proxy --policy ... -- python mcp_notes_server.py``) gets the same.

Run it: ``python examples/mcp_proxy.py`` (needs ``pip install 'agent-gate[mcp]'``; add
``--db URL`` to keep the ledger; by default a fresh temporary directory, said where).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

HERE = Path(__file__).resolve().parent


def text(result: Any) -> str:
    return " ".join(c.text for c in result.content if c.type == "text")


async def session(db: str, notes: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "agent_gate", "mcp", "proxy",
               "--policy", str(HERE / "mcp_policy.yaml"), "--db", db, "--task", "notes",
               "--", sys.executable, str(HERE / "mcp_notes_server.py")]
    params = StdioServerParameters(command=command[0], args=command[1:],
                                   env=dict(os.environ, NOTES_FILE=str(notes)))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        tools = [t.name for t in (await client.list_tools()).tools]
        first = await client.call_tool("add_note", {"text": "buy milk"})
        again = await client.call_tool("add_note", {"text": "buy milk"})
        listed = await client.call_tool("list_notes", {})
        denied = await client.call_tool("delete_notes", {})
    return {
        "tools": tools,
        "first": text(first),
        "again": (text(again), (again.meta or {}).get("agent-gate/replayed")),
        "listed": listed.structured_content,
        "denied": (denied.is_error, (denied.meta or {}).get("agent-gate/rule-ids")),
        "notes": notes.read_text("utf-8").splitlines(),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="ledger URL (default: a fresh temporary SQLite file)")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="agent-gate-mcp-"))
    db = args.db or f"sqlite:///{workdir / 'ledger.db'}"
    report = anyio.run(session, db, workdir / "notes.txt")
    print(f"ledger: {db}")
    for key, value in report.items():
        print(f"{key:>7}: {value}")
    return report


if __name__ == "__main__":
    main()
