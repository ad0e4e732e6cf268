"""A small real MCP server (the SDK's MCPServer over stdio) that the proxy tests sit in front of.

Every tool that changes something appends one line to the file named by
``$MCP_UPSTREAM_LOG``, so a test counts side effects outside the ledger: a line
there is a run of the tool, whatever any database says.

A test that kills the server mid-call writes a stage to ``$MCP_UPSTREAM_LOG.stall``
(``received``: before ``append_note`` writes; ``wrote``: after it wrote, before it
answers): the next ``append_note`` takes the file away, writes its pid to
``.stalled`` and waits there (bounded) to be killed. ``python mcp_upstream.py
--http PORT`` serves Streamable HTTP on loopback instead of stdio.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("upstream")
LOG = Path(os.environ["MCP_UPSTREAM_LOG"])


def _append(line: str) -> int:
    with LOG.open("a", encoding="utf-8") as f:
        f.write(line + "\n")
    return len(LOG.read_text(encoding="utf-8").splitlines())


def _stall(stage: str) -> None:
    """Wait to be killed here, once, if the test asked for this stage."""
    asked = LOG.with_name(LOG.name + ".stall")
    try:
        if asked.read_text("utf-8").strip() != stage:
            return
        asked.unlink()
    except FileNotFoundError:
        return
    LOG.with_name(LOG.name + ".stalled").write_text(f"{stage} {os.getpid()}", "utf-8")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # bounded: a test that forgot to kill still ends
        time.sleep(0.05)


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def append_note(text: str) -> str:
    """Append a note to the log (a write: a second run is a second line)."""
    _stall("received")
    lines = _append("note:" + text)
    _stall("wrote")
    return f"appended, {lines} lines"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
def wipe(target: str) -> str:
    """Wipe a target (destructive)."""
    return f"wiped, {_append('wipe:' + target)} lines"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def count_lines() -> int:
    """How many lines the log has (a read)."""
    return len(LOG.read_text(encoding="utf-8").splitlines()) if LOG.exists() else 0


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def send_payment(to: str, cents: int) -> str:
    """Pay someone (the policy sends large payments to a person)."""
    return f"paid, {_append(f'pay:{to}:{cents}')} lines"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def charge_card(card: str, cents: int) -> str:
    """Try a charge, which the card's bank declines: the tool ran and reports an error
    (a result with ``isError: true``), after a line is logged."""
    _append(f"charge:{card}:{cents}")
    raise ToolError(f"card {card} declined: insufficient funds for {cents} cents")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def unlisted(text: str) -> str:
    """A tool the policy does not name: hidden by the proxy, and denied if called."""
    return f"unlisted, {_append('unlisted:' + text)} lines"


def stamp(text: str) -> str:
    """Stamp a text (a write, offered only once ``enable_stamp`` ran)."""
    return f"stamped, {_append('stamp:' + text)} lines"


def count_lines_v2(prefix: str) -> int:
    """count_lines with a required argument: the schema the proxy must not take."""
    return 0


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
async def enable_stamp(ctx: Context) -> str:
    """Offer a new tool, change count_lines' schema, and say so (tools/list_changed)."""
    server.add_tool(stamp, annotations=ToolAnnotations(readOnlyHint=False,
                                                       destructiveHint=False))
    server.remove_tool("count_lines")
    server.add_tool(count_lines_v2, name="count_lines",
                    annotations=ToolAnnotations(readOnlyHint=True))
    await ctx.session.send_tool_list_changed()
    return f"enabled, {_append('enable_stamp')} lines"


if __name__ == "__main__":
    LOG.with_name(LOG.name + ".pid").write_text(str(os.getpid()), "utf-8")  # who to kill
    if LOG.with_name(LOG.name + ".v2").exists():  # a new version, as a restart may bring
        server.add_tool(stamp, annotations=ToolAnnotations(readOnlyHint=False,
                                                           destructiveHint=False))
        server.remove_tool("count_lines")
        server.add_tool(count_lines_v2, name="count_lines",
                        annotations=ToolAnnotations(readOnlyHint=True))
    if sys.argv[1:2] == ["--http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
