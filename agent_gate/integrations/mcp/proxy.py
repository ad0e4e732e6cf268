"""``agent-gate mcp proxy``: an MCP server in front of another, every tool call gated.

The proxy is a client of the upstream server (a command it starts and talks to
over stdio, or a Streamable HTTP URL) and a server to its own client (over stdio,
or Streamable HTTP with ``listen``). It offers the upstream's tools (those the
policy names: see ``GatedCalls.visible``) and answers each ``tools/call`` through
the gate: the upstream's ``inputSchema``, the policy, the ledger, the audit chain.
Nothing but ``tools/list`` and ``tools/call`` is proxied.

The task a call is recorded in is ``ProxyConfig.task`` when given (the same task
across restarts, so a call repeated after a restart is answered from the ledger);
otherwise one per client session: the process's own for stdio (one client), and for
Streamable HTTP one named from a hash of the ``Mcp-Session-Id`` (``session_task``):
a task id is shown to operators, in the inbox and in audit bundles, and the session
id is the session's only credential.

Served over Streamable HTTP, the proxy keeps each session's events in the ledger's
database (``events``), so a client that loses its connection resumes the response
with ``Last-Event-ID``, after a restart of the proxy too.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import uuid
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
import mcp.types as mt
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.session import MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.stdio import stdio_server

from agent_gate.errors import AgentGateError, GateUsageError
from agent_gate.gate import Gate, Outcome
from agent_gate.integrations.mcp.calls import DEFAULT_PROGRESS_EVERY, GatedCalls
from agent_gate.integrations.mcp.events import http_app
from agent_gate.integrations.mcp.upstream import Registered
from agent_gate.ledger.mcp_events import DEFAULT_EVENT_BOUNDS, EventBounds, McpEventLog
from agent_gate.policy import Principal
from agent_gate.tools import Effect

__all__ = ["DEFAULT_APPROVAL_WAIT", "ProxyConfig", "connect_upstream", "dedupe_problems",
           "parse_dedupe", "proxy_server", "serve", "session_task"]

DEFAULT_APPROVAL_WAIT = 50.0
"""Seconds a call that waits for approval holds its request open (``--approval-wait``).

Under a minute on purpose: the TypeScript SDK (the Inspector, most editors) gives a
request 60 s unless the client resets its timeout on progress, and a client that
timed out shows "Request timed out" instead of the result that says the call waits
and under which id. A client that resets on progress (``resetTimeoutOnProgress``, and
a progress token in its request) can be given more."""

_APPROVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Run this call once"}},
    "required": ["approve"],
}


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """How the proxy reaches its upstream, records calls and serves its client."""

    upstream_command: tuple[str, ...] = ()
    upstream_url: str | None = None
    task: str | None = None
    principal: Principal | None = None
    approval_wait: float = DEFAULT_APPROVAL_WAIT
    listen: tuple[str, int] | None = None
    dedupe: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Tool -> the argument names that make two of its calls the same (``--dedupe``)."""
    progress_every: float = DEFAULT_PROGRESS_EVERY
    """Seconds between progress notifications while a call is held."""
    events: EventBounds = DEFAULT_EVENT_BOUNDS
    """How much of the Streamable HTTP sessions' events is kept (``ledger.mcp_events``)."""


@asynccontextmanager
async def connect_upstream(
    config: ProxyConfig, on_message: MessageHandlerFnT | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized client session with the upstream server, closed on exit;
    ``on_message`` receives the upstream's notifications.

    A command's environment is the proxy's own, so settings an MCP client gives the
    proxy (``env`` in its server list) reach the server behind it.
    """
    async with AsyncExitStack() as stack:
        if config.upstream_url is not None:
            read, write = await stack.enter_async_context(
                streamable_http_client(config.upstream_url)
            )
        else:
            command, *args = config.upstream_command
            params = StdioServerParameters(command=command, args=args, env=dict(os.environ))
            read, write = await stack.enter_async_context(stdio_client(params, sys.stderr))
        session = await stack.enter_async_context(
            ClientSession(read, write, message_handler=on_message)
        )
        await session.initialize()
        yield session


def session_task(session_id: str) -> str:
    """The task of a Streamable HTTP session's calls: named from a hash of its id, so
    that where the task id is shown, the session id (its credential) is not."""
    return "mcp-session-" + hashlib.sha256(session_id.encode()).hexdigest()[:32]


def _task_of(ctx: ServerRequestContext[Any, Any], config: ProxyConfig, own: str) -> str:
    if config.task is not None:
        return config.task
    request = ctx.request
    headers = getattr(request, "headers", None)
    session_id = headers.get("mcp-session-id") if headers is not None else None
    return session_task(session_id) if session_id else own


def _asker(ctx: ServerRequestContext[Any, Any], calls: GatedCalls, task: str) -> Any:
    """Ask the user through elicitation, when the client can and the policy lets the
    task's own principal approve this tool (``approvers.self_approval``)."""
    gate, principal = calls.gate, calls.principal
    caps = ctx.session.client_capabilities
    if (caps is None or caps.elicitation is None or gate.rules is None
            or principal is None or principal.id is None):
        return None
    who = principal.id

    async def ask(outcome: Outcome) -> bool:
        if gate.rules is None or gate.rules.policy.approval_refusal(outcome.tool, who, who):
            return False
        rec = await anyio.to_thread.run_sync(gate.ledger.get, task, outcome.call_id)
        shown = rec.arguments if rec is not None else None  # stored form: redacted
        try:
            answer = await ctx.session.elicit_form(
                f"agent-gate: call {outcome.call_id} of {outcome.tool!r} with arguments "
                f"{shown} waits for approval ({outcome.reason}). Run it once?",
                _APPROVE_SCHEMA,  # type: ignore[arg-type]
                related_request_id=ctx.request_id,
            )
        except Exception:  # the client could not ask: an operator still can
            return False
        if answer.action == "cancel":
            return False
        if answer.action == "accept" and (answer.content or {}).get("approve") is True:
            await anyio.to_thread.run_sync(lambda: gate.approve(
                outcome.call_id, by=who, task_id=task,
                reason="approved by the user, asked through the MCP client",
            ))
        else:
            await anyio.to_thread.run_sync(lambda: gate.deny(
                outcome.call_id, by=who, task_id=task,
                reason="declined by the user, asked through the MCP client",
            ))
        return True

    return ask


def proxy_server(
    calls: GatedCalls, config: ProxyConfig, clients: weakref.WeakSet[Any] | None = None
) -> Server[Any]:
    """The MCP server the proxy's client talks to; ``calls`` reaches the upstream.
    ``clients`` collects the sessions of the clients that made a request."""
    own_task = f"mcp-{uuid.uuid4().hex}"
    seen: weakref.WeakSet[Any] = clients if clients is not None else weakref.WeakSet()

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: mt.PaginatedRequestParams | None
    ) -> mt.ListToolsResult:
        seen.add(ctx.session)
        return mt.ListToolsResult(tools=calls.visible(await calls.load_tools()))

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: mt.CallToolRequestParams
    ) -> mt.CallToolResult:
        seen.add(ctx.session)
        task = _task_of(ctx, config, own_task)

        async def progress(done: float, total: float | None, message: str) -> None:
            await ctx.session.report_progress(done, total, message)

        try:
            return await calls.call(
                task, params.name, params.arguments, meta=params.meta,  # type: ignore[arg-type]
                progress=progress, ask=_asker(ctx, calls, task),
            )
        except AgentGateError as exc:  # a bad _meta call id, a task bound elsewhere...
            return mt.CallToolResult(
                content=[mt.TextContent(type="text", text=f"agent-gate: {exc}")], is_error=True
            )

    return Server(
        "agent-gate-proxy",
        instructions="Every tool call is checked and recorded by agent-gate before it runs.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve(gate: Gate, config: ProxyConfig) -> None:
    """Run the proxy until its client goes away (stdio) or it is stopped (HTTP).

    Raises ``GateUsageError`` (after closing the upstream) when ``config.dedupe``
    names a tool the upstream does not offer, a field its schema does not declare,
    or a tool that only reads."""
    problems: list[str] = []
    changes, changed = anyio.create_memory_object_stream[None](1)

    async def on_message(message: Any) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            with contextlib.suppress(anyio.WouldBlock):  # a re-read is due already
                changes.send_nowait(None)

    async with connect_upstream(config, on_message) as upstream:
        calls = GatedCalls(gate, upstream, approval_wait=config.approval_wait,
                           principal=config.principal, dedupe=config.dedupe,
                           progress_every=config.progress_every)
        await calls.load_tools()
        problems = dedupe_problems(calls)
        _say(calls, Registered((), tuple((n, "") for n in config.dedupe)))
        if not problems:
            clients: weakref.WeakSet[Any] = weakref.WeakSet()
            server = proxy_server(calls, config, clients)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_follow, calls, changed, clients)
                if config.listen is None:
                    async with stdio_server() as (read, write):
                        options = server.create_initialization_options(
                            NotificationOptions(tools_changed=True)
                        )
                        await server.run(read, write, options)
                else:
                    await _serve_http(server, config.listen, gate, config.events)
                tg.cancel_scope.cancel()
    if problems:
        raise GateUsageError("--dedupe: " + "; ".join(problems))


def _say(calls: GatedCalls, before: Registered) -> None:
    """On stderr: the tools not offered, and those whose new schema is not taken,
    since ``before``."""
    told = {name for name, _ in before.refused}
    for name, why in calls.registered.refused:
        if name not in told:
            print(f"agent-gate mcp proxy: tool {name!r} not offered: {why}", file=sys.stderr)
    for name in sorted(set(calls.registered.kept) - set(before.kept)):
        print(f"agent-gate mcp proxy: the upstream changed the inputSchema of {name!r}; "
              "calls are still checked against the schema it had at start (restart the "
              "proxy to take the new one)", file=sys.stderr)


async def _follow(
    calls: GatedCalls, changed: MemoryObjectReceiveStream[None], clients: weakref.WeakSet[Any]
) -> None:
    """Each time the upstream says its tools changed: re-read and register them, and
    tell the proxy's clients that the tools it offers may have changed."""
    async for _ in changed:
        before = calls.registered
        try:
            await calls.load_tools()
        except Exception as exc:  # the upstream went away: its session ends the proxy
            print(f"agent-gate mcp proxy: could not re-read the upstream's tools ({exc})",
                  file=sys.stderr)
            continue
        _say(calls, before)
        for session in list(clients):
            with contextlib.suppress(Exception):  # a client gone away
                await session.send_tool_list_changed()


def dedupe_problems(calls: GatedCalls) -> list[str]:
    """Why each ``--dedupe`` cannot be honoured. A read is refused a key: its calls
    would all be answered from the first one, ever, which no read wants."""
    gate = calls.gate
    refused = dict(calls.registered.refused)
    problems: list[str] = []
    for name in calls.dedupe:
        tool = gate.tools.get(name)
        if name in refused:
            problems.append(refused[name])
        elif tool is None:
            problems.append(f"the upstream offers no tool {name!r}")
        elif (gate.rules.effective(tool.spec).effect if gate.rules is not None
              else tool.spec.effect) is Effect.READ:
            problems.append(f"tool {name!r} only reads: a dedupe key would answer every "
                            "later read from the first")
    return problems


def parse_dedupe(values: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``TOOL=FIELD[,FIELD...]`` options as a mapping; ValueError for a malformed one."""
    dedupe: dict[str, tuple[str, ...]] = {}
    for value in values:
        tool, sep, names = value.partition("=")
        fields = tuple(f.strip() for f in names.split(",") if f.strip())
        if not sep or not tool.strip() or not fields:
            raise ValueError(f"{value!r} is not TOOL=FIELD[,FIELD...]")
        if tool.strip() in dedupe:
            raise ValueError(f"tool {tool.strip()!r} is given twice")
        dedupe[tool.strip()] = fields
    return dedupe


async def _serve_http(
    server: Server[Any], listen: tuple[str, int], gate: Gate, bounds: EventBounds,
) -> None:
    """Serve ``server`` over Streamable HTTP, each session's events kept in the
    ledger's database. A call of a tool whose fields the policy redacts is not kept
    as sent (its arguments would be in clear): after a restart its resumed stream is
    answered with an error asking the client to send it again."""
    import uvicorn

    def keeps(request: dict[str, Any]) -> bool:
        if request.get("method") != "tools/call" or gate.rules is None:
            return True
        params = request.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        return isinstance(name, str) and not gate.rules.redacts(name)

    host, port = listen
    app = http_app(server, McpEventLog(gate.ledger.engine, bounds), host=host, keeps=keeps)
    await uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    ).serve()


def principal_of(principal_id: str | None, roles: Sequence[str]) -> Principal | None:
    """The principal named on the command line, if any."""
    if principal_id is None and not roles:
        return None
    return Principal(id=principal_id, roles=frozenset(roles))
