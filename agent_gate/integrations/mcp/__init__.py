"""MCP behind the gate: a gated client session, and a proxy in front of any MCP server.

Needs the ``mcp`` extra (``pip install 'agent-gate[mcp]'``, the official SDK 2.x).

- ``upstream``: an MCP server's tools registered in a gate, each dispatched to it;
- ``wire``: the proxy's transports to its upstream, recording how far each request got;
- ``link``: the proxy's connection to its upstream, made again with backoff when lost;
- ``peer``: one client session as its upstream sees it (notifications, input requests);
- ``sessions``: one upstream session per client session, closed when the client's ends;
- ``forward``: resources, prompts, completions and logging, forwarded as offered;
- ``identity``: what "the same call" is for calls that arrive without an id;
- ``results``: a gate's outcome as an MCP tool result;
- ``calls``: one call through the gate, held while it waits; ``GatedSession``;
- ``events``: the proxy's Streamable HTTP sessions, each with its own event store in
  the ledger's database (``ledger.mcp_events``): isolated, and resumable after a restart;
- ``proxy``: ``agent-gate mcp proxy``, the server a client talks to;
- ``check``: ``agent-gate mcp check``, what the proxy would offer, and why not the rest.
"""

from __future__ import annotations

from agent_gate.integrations.mcp.calls import GatedCalls, GatedSession
from agent_gate.integrations.mcp.identity import CALL_ID_META
from agent_gate.integrations.mcp.proxy import DEFAULT_APPROVAL_WAIT, ProxyConfig, serve
from agent_gate.integrations.mcp.upstream import IDEMPOTENCY_KEY_META

__all__ = [
    "CALL_ID_META",
    "DEFAULT_APPROVAL_WAIT",
    "IDEMPOTENCY_KEY_META",
    "GatedCalls",
    "GatedSession",
    "ProxyConfig",
    "serve",
]
