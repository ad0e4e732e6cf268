"""``agent-gate mcp proxy``: an MCP server in front of another, every tool call gated.

The proxy is a client of the upstream server (a command it starts and talks to
over stdio, or a Streamable HTTP URL) and a server to its own client (over stdio,
or Streamable HTTP with ``listen``). It offers the upstream's tools (those the
policy names: see ``GatedCalls.visible``) and answers each ``tools/call`` through
the gate: the upstream's ``inputSchema``, the policy, the ledger, the audit chain.
The rest of the protocol is forwarded as the upstream offers it (``forward``), each
client session through an upstream session of its own (``sessions``), so that what
the upstream sends on its own reaches the client whose session caused it (``peer``).

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
import threading
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import mcp.types as mt
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp import ClientSession
from mcp.client.session import MessageHandlerFnT
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.models import InitializationOptions
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR

from agent_gate.errors import AgentGateError, GateUsageError, UpstreamUnavailable, error_code
from agent_gate.gate import Gate, Outcome
from agent_gate.integrations.mcp import forward
from agent_gate.integrations.mcp.calls import DEFAULT_PROGRESS_EVERY, GatedCalls
from agent_gate.integrations.mcp.events import http_app
from agent_gate.integrations.mcp.link import DEFAULT_START_TIMEOUT, Backoff, Link
from agent_gate.integrations.mcp.peer import Audit, ClientPeer
from agent_gate.integrations.mcp.results import unavailable
from agent_gate.integrations.mcp.sampling import SamplingCalls
from agent_gate.integrations.mcp.sessions import ClientUpstream, UpstreamSessions, connection_of
from agent_gate.integrations.mcp.upstream import Registered, Route
from agent_gate.ledger.mcp_events import DEFAULT_EVENT_BOUNDS, EventBounds, McpEventLog
from agent_gate.policy import Principal
from agent_gate.policy.mcp_rules import McpPolicy
from agent_gate.tools import CallInfo, Effect

__all__ = ["DEFAULT_APPROVAL_WAIT", "ProxyConfig", "Startup", "connect_upstream",
           "dedupe_problems", "link_of", "parse_dedupe", "proxy_server", "serve",
           "session_task"]

DEFAULT_APPROVAL_WAIT = 50.0
"""Seconds a call that waits for approval holds its request open (``--approval-wait``).

Under a minute on purpose: the TypeScript SDK (the Inspector, most editors) gives a
request 60 s unless the client resets its timeout on progress, and a client that
timed out shows "Request timed out" instead of the result that says the call waits
and under which id. A client that resets on progress (``resetTimeoutOnProgress``, and
a progress token in its request) can be given more."""

DEFAULT_MAX_UPSTREAMS = 64
"""Client sessions with an upstream session of their own at once, by default: each may
be a child process, and the SDK keeps up to 10,000 sessions."""

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
    restart: bool = True
    """Start (or reconnect to) an upstream that went away, after ``backoff``; else stop
    (``--upstream-restart / --no-upstream-restart``)."""
    backoff: Backoff = field(default_factory=Backoff)
    start_timeout: float = DEFAULT_START_TIMEOUT
    """Seconds the upstream has to start and answer ``initialize``."""
    progress_every: float = DEFAULT_PROGRESS_EVERY
    """Seconds between progress notifications while a call is held."""
    events: EventBounds = DEFAULT_EVENT_BOUNDS
    """How much of the Streamable HTTP sessions' events is kept (``ledger.mcp_events``)."""
    max_upstreams: int | None = DEFAULT_MAX_UPSTREAMS
    """Served over HTTP: how many client sessions may each have their own upstream
    session (a child process, for a command) at once (``--max-upstream-sessions``)."""


def link_of(
    config: ProxyConfig, on_message: MessageHandlerFnT | None = None,
    on_up: Callable[[], Awaitable[Any]] | None = None, peer: ClientPeer | None = None,
) -> Link:
    """The link to the upstream ``config`` names; ``peer`` is the client session it serves."""
    return Link(config.upstream_command, config.upstream_url, restart=config.restart,
                backoff=config.backoff, start_timeout=config.start_timeout,
                on_message=on_message, on_up=on_up, peer=peer)


@asynccontextmanager
async def connect_upstream(
    config: ProxyConfig, on_message: MessageHandlerFnT | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized client session with the upstream server, closed on exit;
    ``on_message`` receives the upstream's notifications. ``UpstreamUnavailable``
    (one line) when it cannot be started or reached.

    A command's environment is the proxy's own, so settings an MCP client gives the
    proxy (``env`` in its server list) reach the server behind it.
    """
    async with link_of(config, on_message).connected() as session:
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
        seen = rec.args_hash if rec is not None else None  # the answer is to these
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
                outcome.call_id, by=who, task_id=task, args_hash=seen,
                reason="approved by the user, asked through the MCP client",
            ))
        else:
            await anyio.to_thread.run_sync(lambda: gate.deny(
                outcome.call_id, by=who, task_id=task, args_hash=seen,
                reason="declined by the user, asked through the MCP client",
            ))
        return True

    return ask


class Startup:
    """What every client request waits for: the first connection to the upstream.

    When the upstream cannot be started (or is lost and not restarted) the proxy
    stops, but not before the requests its client already sent are answered with a
    JSON-RPC error that says why (``fatal``): a client is never left with nothing.
    """

    GRACE = 2.0
    """Seconds a stopping stdio proxy waits for its client's first request to answer."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.fatal: AgentGateError | None = None
        self.in_flight = 0
        self.answered = 0

    async def check(self) -> None:
        """Wait for the first connection; a JSON-RPC error if the proxy cannot serve."""
        await self.done.wait()
        if self.fatal is not None:
            self.answered += 1
            raise MCPError(INTERNAL_ERROR, f"agent-gate mcp proxy: {self.fatal}")

    def fail(self, exc: AgentGateError) -> None:
        self.fatal = exc
        self.done.set()

    async def drain(self) -> None:
        """Until the requests in flight are answered, and the client had a moment to ask."""
        deadline = anyio.current_time() + self.GRACE
        while self.in_flight or (not self.answered and anyio.current_time() < deadline):
            await anyio.sleep(0.05)
        await anyio.sleep(0.1)  # the last answer's write to the client


class _ProxyServer(Server[Any]):
    """The SDK's server, advertising the upstream's capabilities (``forward.advertised``)
    rather than those derived from the handlers it has: the SDK's session manager asks
    each new Streamable HTTP session's options of ``create_initialization_options``."""

    def __init__(self, capabilities: forward.Capabilities, **options: Any) -> None:
        super().__init__("agent-gate-proxy", **options)
        self.upstream_capabilities = capabilities

    def create_initialization_options(self, *args: Any, **kwargs: Any) -> InitializationOptions:
        options = super().create_initialization_options(*args, **kwargs)
        caps = forward.advertised(self.upstream_capabilities())
        return options.model_copy(update={"capabilities": caps})


def proxy_server(
    calls: GatedCalls, config: ProxyConfig, clients: weakref.WeakSet[Any] | None = None,
    startup: Startup | None = None, sessions: UpstreamSessions | None = None,
) -> Server[Any]:
    """The MCP server the proxy's client talks to; ``calls`` reaches the upstream, each
    client session through its own upstream session (``sessions``; default: all through
    ``calls``'s). ``clients`` collects the connections of the clients that made a
    request; requests wait for ``startup`` (when given) and fail with it."""
    own_task = f"mcp-{uuid.uuid4().hex}"
    seen: weakref.WeakSet[Any] = clients if clients is not None else weakref.WeakSet()
    if startup is None:
        startup = Startup()
        startup.done.set()
    if sessions is None:
        assert isinstance(calls.link, Link), "a proxy's upstream is a Link"
        link = calls.link
        sessions = UpstreamSessions(None, lambda peer: link,
                                    shared=ClientUpstream(link, link.peer or ClientPeer()))
    sessions.task_of = lambda ctx: _task_of(ctx, config, own_task)
    known: list[mt.ServerCapabilities | None] = [None]

    def capabilities() -> mt.ServerCapabilities | None:
        """The upstream's, as its first link last read them."""
        session = calls.link.session
        if session is not None and session.server_capabilities is not None:
            known[0] = session.server_capabilities
        return known[0]

    async def upstream_of(ctx: ServerRequestContext[Any, Any]) -> ClientUpstream:
        try:
            return await sessions.of(ctx)
        except UpstreamUnavailable as exc:
            raise MCPError(INTERNAL_ERROR, "agent-gate mcp proxy: upstream unavailable, "
                           f"retry ({exc})") from None

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: mt.PaginatedRequestParams | None
    ) -> mt.ListToolsResult:
        seen.add(connection_of(ctx))
        startup.in_flight += 1
        try:
            await startup.check()
            made = await upstream_of(ctx)
            try:
                tools = await calls.load_tools(made.link)
            except (UpstreamUnavailable, MCPError, anyio.BrokenResourceError,
                    anyio.ClosedResourceError) as exc:
                if calls.listed is None:  # never listed: nothing to show
                    raise MCPError(INTERNAL_ERROR, "agent-gate mcp proxy: upstream unavailable, "
                                   f"retry ({_short(exc)})") from None
                tools = calls.listed  # down: the tools as last listed; calls say to retry
            return mt.ListToolsResult(tools=calls.visible(tools))
        finally:
            startup.in_flight -= 1

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: mt.CallToolRequestParams
    ) -> mt.CallToolResult:
        seen.add(connection_of(ctx))
        task = _task_of(ctx, config, own_task)

        async def progress(done: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(done, total, message)

        startup.in_flight += 1
        try:
            await startup.check()
            made = await sessions.of(ctx)
            with made.peer.serving(ctx, params.name, progress) as serving:
                return await calls.call(
                    task, params.name, params.arguments, meta=params.meta,  # type: ignore[arg-type]
                    progress=progress, ask=_asker(ctx, calls, task),
                    route=Route(made.link, progress, serving.degraded, serving.started),
                )
        except UpstreamUnavailable as exc:  # went down while the call was being looked up
            return unavailable(params.name, str(exc))
        except AgentGateError as exc:  # a bad _meta call id, a task bound elsewhere...
            return mt.CallToolResult(
                content=[mt.TextContent(type="text", text=f"agent-gate: {exc}")], is_error=True
            )
        finally:
            startup.in_flight -= 1

    server = _ProxyServer(
        capabilities,
        instructions="Every tool call is checked and recorded by agent-gate before it runs.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    forward.install(server, sessions, startup.check, capabilities, lambda: mcp_rules(calls.gate))
    return server


def _auditor(gate: Gate) -> Audit:
    """Records what an upstream asked of the client during a call, on that call's audit
    trail (``mcp_sampling``: the decision and its rule, the request's size; never the
    prompt, which may hold what the policy redacts)."""

    async def audit(info: CallInfo, detail: dict[str, Any]) -> None:
        def note() -> None:
            rec = gate.ledger.get(info.task_id, info.call_id)
            if rec is not None:
                gate.ledger.note(rec, "mcp_sampling", actor="agent-gate-mcp-proxy",
                                 detail=detail)

        await anyio.to_thread.run_sync(note)

    return audit


def mcp_rules(gate: Gate) -> McpPolicy | None:
    """The policy's ``mcp`` section (empty when the file has none); None without a policy."""
    if gate.rules is None:
        return None
    return gate.rules.policy.document.mcp or McpPolicy()


def _short(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, AgentGateError) else error_code(exc)


async def serve(gate: Gate, config: ProxyConfig) -> None:
    """Run the proxy until its client goes away (stdio) or it is stopped (HTTP).

    Raises ``UpstreamUnavailable`` (one line) when the upstream cannot be started
    or reached, or is lost with ``config.restart`` off; ``GateUsageError`` when
    ``config.dedupe`` names a tool the upstream does not offer, a field its schema
    does not declare, or a tool that only reads. Served over stdio, the client's
    requests are answered with that error first. Served over HTTP, the upstream is
    reached before the proxy listens."""
    changes, changed = anyio.create_memory_object_stream[None](1)
    clients: weakref.WeakSet[Any] = weakref.WeakSet()
    ups = 0

    async def on_message(message: Any) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            with contextlib.suppress(anyio.WouldBlock):  # a re-read is due already
                changes.send_nowait(None)
        elif peer is not None:
            await peer.on_message(message)

    async def on_up() -> None:
        """A (new) session: its tools re-read; after a restart, the clients told."""
        nonlocal ups
        before = calls.registered
        await calls.load_tools()
        ups += 1
        if ups > 1:
            _say(calls, before)
            print(f"agent-gate mcp proxy: the upstream {link.name} is back", file=sys.stderr)
            await _tell_tools_changed(clients)

    # Served over stdio, the proxy has one client: the first link is its session's.
    audit = _auditor(gate)
    peer = ClientPeer(lambda: mcp_rules(gate), audit) if config.listen is None else None
    link = link_of(config, on_message, on_up, peer)
    calls = GatedCalls(gate, link, approval_wait=config.approval_wait,
                       principal=config.principal, dedupe=config.dedupe,
                       progress_every=config.progress_every)
    sampler = SamplingCalls(calls)
    if peer is not None:
        peer.sampler = sampler
    startup = Startup()
    try:
        async with anyio.create_task_group() as tg:
            sessions = UpstreamSessions(
                tg, lambda client: _client_link(config, client), lambda: mcp_rules(gate),
                shared=ClientUpstream(link, peer) if peer is not None else None,
                most=config.max_upstreams, audit=audit, sampler=sampler)
            server = proxy_server(calls, config, clients, startup, sessions)
            tg.start_soon(_follow, calls, changed, clients)
            if config.listen is None:
                async with stdio_server(stdin=_StdinLines()) as (read, write):  # type: ignore[arg-type]
                    tg.start_soon(_keep, link, calls, startup, config)
                    await startup.done.wait()  # the upstream's capabilities are the proxy's
                    await server.run(read, write, server.create_initialization_options())
                await startup.done.wait()  # the client left first: still say what failed
            else:
                await tg.start(_keep, link, calls, startup, config)
                await _serve_http(server, config.listen, gate, config.events)
            tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # the one error that stopped the proxy, as itself
        if startup.fatal is None:
            raise
        del group
    if startup.fatal is not None:
        raise startup.fatal


def _client_link(config: ProxyConfig, peer: ClientPeer) -> Link:
    """A client session's own link: what its upstream session sends goes to ``peer``;
    a change of its tools is told to that client, which re-reads them through it."""

    async def on_message(message: Any) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            if peer.connection is not None:
                with contextlib.suppress(Exception):
                    await peer.connection.notify("notifications/tools/list_changed", None)
        else:
            await peer.on_message(message)

    return link_of(config, on_message, None, peer)


class _StdinLines:
    """The client's lines, read by a daemon thread: the SDK's own reader blocks in a
    worker thread no cancellation stops, so a client that keeps stdin open would keep
    a proxy that must stop (its upstream cannot be served) from exiting."""

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[str](16)
        token = anyio.lowlevel.current_token()

        def pump() -> None:
            fd, pending = os.dup(0), b""  # raw reads: no buffer lock held at shutdown
            with contextlib.suppress(Exception):  # the loop is gone: the proxy is stopping
                while chunk := os.read(fd, 65536):
                    *lines, pending = (pending + chunk).split(b"\n")
                    for line in lines:
                        text = line.decode("utf-8", errors="replace") + "\n"
                        anyio.from_thread.run(self.send.send, text, token=token)
                anyio.from_thread.run_sync(self.send.close, token=token)

        threading.Thread(target=pump, name="agent-gate-mcp-stdin", daemon=True).start()

    def __aiter__(self) -> AsyncIterator[str]:
        return self.receive.__aiter__()


async def _keep(
    link: Link, calls: GatedCalls, startup: Startup, config: ProxyConfig,
    *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Keep the link up; once first up, check ``--dedupe`` and let requests through.
    A fatal error is kept in ``startup``, the client's requests answered with it,
    then raised (it ends the proxy)."""

    async def up(*, task_status: TaskStatus[None]) -> None:
        await link.run(task_status=task_status)

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(up)
            problems = dedupe_problems(calls)
            if problems:
                raise GateUsageError("--dedupe: " + "; ".join(problems))
            _say(calls, Registered((), tuple((n, "") for n in config.dedupe)))
            startup.done.set()
            task_status.started()
    except* AgentGateError as group:
        startup.fail(group.exceptions[0])  # type: ignore[arg-type]
        if config.listen is None:
            await startup.drain()
        raise startup.fatal from None


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
        except Exception as exc:  # the upstream went away: the link makes it again
            print(f"agent-gate mcp proxy: could not re-read the upstream's tools ({exc})",
                  file=sys.stderr)
            continue
        _say(calls, before)
        await _tell_tools_changed(clients)


async def _tell_tools_changed(clients: weakref.WeakSet[Any]) -> None:
    """``notifications/tools/list_changed`` to each client connection."""
    for client in list(clients):
        with contextlib.suppress(Exception):  # a client gone away
            if hasattr(client, "outbound"):
                await client.outbound.notify("notifications/tools/list_changed", None)
            else:
                await client.send_tool_list_changed()


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
