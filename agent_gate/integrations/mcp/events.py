"""The proxy's Streamable HTTP sessions: isolated from each other, resumable, after a restart too.

Every message the proxy sends on a request's SSE stream is stored, under a random
event id, in the ledger's database (``ledger.mcp_events``) before it is sent; a
client whose connection broke reconnects with ``Last-Event-ID`` and is sent the rest
of that stream. Resuming re-sends what was produced; it never runs a tool twice: the
call itself is recorded in the ledger, and a request run again is answered from there
(``identity``).

Isolation. The SDK's session manager gives every session the same event store and
keys streams by the JSON-RPC request id, which every client counts from the same
start; one store for all sessions sent one session's results to another that resumed
with its ``Last-Event-ID``. Here each session has its own store (``SessionEvents``),
bound to its session id, and every lookup names that id: an event id of another
session, a pruned one or a guessed one finds nothing, and the resumed stream ends
empty. Session ids are ``secrets.token_urlsafe(32)``, event ids
``secrets.token_urlsafe(24)``: nothing is counted.

Restart. The SDK's ``StreamableHTTPSessionManager`` keeps sessions in a dict in
memory and answers 404 to a session id it does not hold (read in
``mcp/server/streamable_http_manager.py``, ``_handle_stateful_request``), so by
itself a restarted proxy could never resume anything. ``GatedSessionManager``
re-adopts instead: a request naming a session id that this process does not hold but
the database does (a session this proxy opened, neither deleted by its client nor
expired) gets a new transport under that same id, initialized with the session's
stored ``initialize`` request (so the client's capabilities, elicitation included,
are what they were). A resumed stream whose response was never stored (the process
died while the call waited or ran) has its stored request run again in the adopted
session, and the resume waits for its answer: from the ledger if the call finished,
held again if it still waits for approval, in doubt if it was running when the
process died; never a second run of the tool. A session deleted by its client
(``DELETE``) or idle past the SDK's timeout is forgotten, its rows deleted: its id
answers 404 after a restart too. A proxy stopped gracefully keeps its sessions, like
one killed.

What stays with the SDK: the transport, its SSE framing and the order events are
stored and sent in. This module relies on the manager's ``_admit_session``,
``_discard_session``, ``_server_instances`` and on the transport's read stream (for
the adopted session's ``initialize`` and a re-run request), which are not public
API; ``tests/integrations/test_mcp_red_team_sessions.py`` fails if they change.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sys
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus
from mcp.server import Server
from mcp.server.runner import serve_loop
from mcp.server.streamable_http import (
    GET_STREAM_KEY,
    MCP_SESSION_ID_HEADER,
    SESSION_ID_PATTERN,
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamableHTTPServerTransport,
    StreamId,
)
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp.types import (
    INTERNAL_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from agent_gate.ledger.mcp_events import EventKind, McpEventLog

__all__ = ["GatedSessionManager", "SessionEvents", "http_app", "new_session_id"]

_OPENING: ContextVar[bytes | None] = ContextVar("agent_gate_mcp_opening", default=None)
"""The body of the request being served that opens a session (its ``initialize``)."""
_RESUMING: ContextVar[Scope | None] = ContextVar("agent_gate_mcp_resuming", default=None)
"""The HTTP request being served, for a request run again on its behalf."""

Keeps = Callable[[dict[str, Any]], bool]
"""Whether a request (parsed JSON-RPC) may be stored in the database as it was sent."""

_ENDED_KEPT = 100_000
"""Ids of ended sessions a process remembers (never to re-adopt them), newest kept."""

_TAIL_POLL = 1.0
"""Seconds a resumed stream waits for a new event before it looks for itself."""


def new_session_id() -> str:
    """A session id nobody can guess (256 random bits, visible ASCII)."""
    return secrets.token_urlsafe(32)


def _answers(message: JSONRPCMessage | None) -> bool:
    return isinstance(message, JSONRPCResponse | JSONRPCError)


def _unanswerable(stream: str) -> JSONRPCError:
    """The answer to a request that died with a proxy and was not kept to run again."""
    request_id: str | int = int(stream) if stream.lstrip("-").isdigit() else stream
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(
        code=INTERNAL_ERROR,
        message="agent-gate: the proxy restarted before this request was answered; send it "
                "again (a tool call is answered from the ledger, never run twice)"))


def _parsed(text: str) -> JSONRPCMessage:
    return jsonrpc_message_adapter.validate_json(text, by_name=False)


class SessionEvents(EventStore):
    """One session's event store: every read and write names its session."""

    def __init__(self, log: McpEventLog, session_id: str, opening: bytes | None) -> None:
        self.log = log
        self.session_id = session_id
        self._opening = opening
        self._changed = anyio.Event()
        self._internal: set[str] = set()  # the adopted session's own initialize: not stored
        self.live: set[str] = set()
        """Streams whose request this process received (and so answers itself)."""
        self.transport: StreamableHTTPServerTransport | None = None
        self.closed = False

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def close(self) -> None:
        """The session ended: resumed streams waiting on it stop."""
        self.closed = True
        self._wake()

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        if stream_id in self._internal:
            return secrets.token_urlsafe(24)  # never stored, so never found
        if self._opening is not None:  # the session's first event: record the session
            opening, self._opening = self._opening, None
            await self._run(self.log.open_session, self.session_id, opening.decode())
        text = None if message is None else message.model_dump_json(by_alias=True,
                                                                     exclude_unset=True)
        event_id: str = await self._run(self.log.append, self.session_id, stream_id,
                                        EventKind.EVENT, text)
        self._wake()
        return event_id

    async def remember(self, stream_id: str, request: bytes) -> None:
        """Keep a request this process received, for a resume in another process."""
        await self._run(self.log.append, self.session_id, stream_id, EventKind.REQUEST,
                        request.decode())

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        """Send this session's events of the stream after ``last_event_id``, then
        the stream's new events until its response was sent (running the stream's
        request again first when no process is answering it); the stream id while
        it stays open (the session ended first), else None. Nothing is sent for an
        id this session never stored."""
        found = await self._run(self.log.find, self.session_id, last_event_id)
        if found is None:
            return None
        stream, last = found
        if last.message is not None and _answers(_parsed(last.message)):
            return None  # the client has the response: nothing follows it
        seq, answered = await self._send_after(stream, last.seq, send_callback)
        if not answered and stream != GET_STREAM_KEY and stream not in self.live:
            request = await self._run(self.log.request, self.session_id, stream)
            self.live.add(stream)
            if request is not None:
                await self._rerun(request)
            else:  # not kept (redacted arguments, or pruned): the client sends it again
                await self.store_event(stream, _unanswerable(stream))
        while not answered and not self.closed:
            changed = self._changed
            before = seq
            seq, answered = await self._send_after(stream, seq, send_callback)
            if seq == before and not answered:
                with anyio.move_on_after(_TAIL_POLL):
                    await changed.wait()
        # Answered: nothing more will come on the stream, so the SDK is not told to
        # keep it open for more (it would hold the connection until the client left).
        return None if answered else stream

    async def _send_after(
        self, stream: str, seq: int, send: EventCallback
    ) -> tuple[int, bool]:
        answered = False
        for row in await self._run(self.log.after, self.session_id, stream, seq):
            seq = row.seq
            if row.kind is not EventKind.EVENT or row.message is None:
                continue
            message = _parsed(row.message)
            await send(EventMessage(message, row.event_id))
            if _answers(message):
                answered = True
                break
        return seq, answered

    async def adopt(self, initialize: str) -> None:
        """Initialize this process's new server session as the client once did."""
        opening = _parsed(initialize)
        assert isinstance(opening, JSONRPCRequest)
        own = f"agent-gate-adopt-{secrets.token_urlsafe(12)}"
        self._internal.add(own)
        await self._send(opening.model_copy(update={"id": own}), None)
        await self._send(JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized"),
                         None)

    async def _rerun(self, request: str) -> None:
        message = _parsed(request)
        scope = _RESUMING.get()
        await self._send(message, Request(scope) if scope is not None else None)

    async def _send(self, message: JSONRPCMessage, request: Request | None) -> None:
        writer = self.transport._read_stream_writer if self.transport is not None else None
        if writer is None:
            raise RuntimeError("the session's transport is not connected")
        await writer.send(SessionMessage(message, metadata=ServerMessageMetadata(
            request_context=request)))


class GatedSessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager with a store per session, unguessable ids, and
    sessions re-adopted from the database after a restart (module docstring)."""

    def __init__(
        self, app: Server[Any], log: McpEventLog, *, keeps: Keeps = lambda message: True,
        **options: Any,
    ) -> None:
        super().__init__(app, event_store=None, **options)
        self.log = log
        self.keeps = keeps
        self.sessions: dict[str, SessionEvents] = {}
        # Ended in this process (deleted by its client, idle): never taken back here,
        # even while its rows are still being deleted. Marked when the DELETE arrives:
        # the SDK answers it before the session's task has ended and been discarded.
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._closing = False

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with super().run():
            try:
                yield
            finally:  # a graceful stop keeps the sessions for the next process
                self._closing = True

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _body(receive) if scope.get("method") == "POST" else None
        if body is not None:
            receive = _replaying(body, receive)
        session_id = Headers(scope=scope).get(MCP_SESSION_ID_HEADER)
        if (scope.get("method") == "DELETE" and session_id is not None
                and session_id in self._server_instances):
            # Its rows go before the DELETE is answered: a proxy started after the
            # answer finds nothing to take back.
            self._end(session_id)
            await anyio.to_thread.run_sync(self.log.end_session, session_id)
        if session_id is not None and session_id not in self._server_instances:
            await self._adopt(session_id)
        events = self.sessions.get(session_id) if session_id is not None else None
        if events is not None and body is not None:
            request = _request(body)
            if request is not None:
                events.live.add(str(request["id"]))
                if self.keeps(request):
                    await events.remember(str(request["id"]), body)
        opening, resuming = _OPENING.set(body), _RESUMING.set(scope)
        try:
            await super()._handle_stateful_request(scope, receive, send)
        finally:
            _OPENING.reset(opening)
            _RESUMING.reset(resuming)

    def _admit_session(self, requestor: Any) -> StreamableHTTPServerTransport | None:
        if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            return None
        session_id = new_session_id()
        transport = self._transport(session_id, _OPENING.get())
        if requestor is not None:
            self._session_owners[session_id] = requestor
        self._server_instances[session_id] = transport
        return transport

    def _transport(self, session_id: str, opening: bytes | None) -> StreamableHTTPServerTransport:
        events = SessionEvents(self.log, session_id, opening)
        transport = StreamableHTTPServerTransport(
            mcp_session_id=session_id,
            is_json_response_enabled=self.json_response,
            event_store=events,
            security_settings=self.security_settings,
            retry_interval=self.retry_interval,
            idle_timeout=self.session_idle_timeout,
        )
        events.transport = transport
        self.sessions[session_id] = events
        return transport

    def _end(self, session_id: str) -> None:
        """Never take ``session_id`` back in this process (the newest ``_ENDED_KEPT``)."""
        self._ended[session_id] = None
        while len(self._ended) > _ENDED_KEPT:
            self._ended.popitem(last=False)

    async def _adopt(self, session_id: str) -> None:
        """Serve ``session_id`` again if the database holds it (module docstring)."""
        if (not SESSION_ID_PATTERN.fullmatch(session_id) or self._task_group is None
                or session_id in self._ended):
            return
        initialize = await anyio.to_thread.run_sync(self.log.session, session_id)
        if initialize is None:
            return
        async with self._session_creation_lock:
            if session_id in self._server_instances or session_id in self._ended or (
                self.max_sessions is not None and len(self._server_instances) >= self.max_sessions
            ):
                return
            transport = self._transport(session_id, None)
            self._server_instances[session_id] = transport
        await self._task_group.start(self._serve_session, session_id, transport)
        await self.sessions[session_id].adopt(initialize)

    async def _serve_session(
        self, session_id: str, transport: StreamableHTTPServerTransport,
        *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """An adopted session's server task: what the SDK runs for a new one."""
        async with transport.connect() as (read, write):
            task_status.started()
            try:
                idle = transport.idle_scope or anyio.CancelScope()
                with idle:
                    await serve_loop(self.app, read, write, lifespan_state=self._lifespan_state,
                                     session_id=session_id)
            finally:
                await self._discard_session(session_id, transport)

    async def _discard_session(
        self, session_id: str, transport: StreamableHTTPServerTransport
    ) -> None:
        events = self.sessions.pop(session_id, None)
        forget = events is not None and not self._closing
        if forget:  # deleted by its client, idle, or never opened: never adopted again
            self._end(session_id)
        await super()._discard_session(session_id, transport)
        if events is not None:
            events.close()
        if forget:
            with anyio.CancelScope(shield=True):
                try:
                    await anyio.to_thread.run_sync(self.log.end_session, session_id)
                except Exception as exc:  # its rows age out; this process never adopts it
                    print(f"agent-gate mcp proxy: could not forget an ended session's events "
                          f"({type(exc).__name__}); they are pruned by age", file=sys.stderr)


async def _body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


def _request(body: bytes) -> dict[str, Any] | None:
    """The request the body holds (not ``initialize``), else None."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if (not isinstance(message, dict) or "id" not in message or "method" not in message
            or message["method"] == "initialize"):
        return None
    return message


def http_app(
    server: Server[Any], log: McpEventLog, *, host: str, keeps: Keeps = lambda message: True,
) -> Starlette:
    """The proxy's Streamable HTTP app at ``/mcp``: ``GatedSessionManager`` sessions,
    DNS-rebinding protection on a loopback host (as the SDK's own app has). ``keeps``
    says which requests may be stored for a run after a restart."""
    security = None
    if host in ("127.0.0.1", "localhost", "::1"):
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    manager = GatedSessionManager(server, log, keeps=keeps, security_settings=security)
    return Starlette(routes=[Route("/mcp", endpoint=StreamableHTTPASGIApp(manager))],
                     lifespan=lambda app: manager.run())

