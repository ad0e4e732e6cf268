"""The proxy's transports to its upstream, each recording what became of a tool call's request.

The SDK answers a request it could not send, and one whose connection closed
after it was sent, with the same ``MCPError`` (``CONNECTION_CLOSED``); only the
first is a sure "it did not run". So the proxy's transports note, per
``tools/call`` (keyed by the idempotency key its ``_meta`` carries), how far its
request got (``Sent``), and ``upstream`` decides from that, never from the error
alone:

- over stdio, a request is ``SENT`` once any byte of its line is in the server's
  stdin pipe (the pipe holds it: the server may read and run it even if it dies
  next); a line none of which went in (nothing reads the pipe any more: ``EPIPE``)
  leaves it ``NOT_SENT``. The pipe decides, not the process: a server that died
  while a child of it still reads its stdin may yet get the request;
- over Streamable HTTP, a request whose connection could not be opened stays
  ``NOT_SENT``; an HTTP 404 (the server no longer knows the session: it did not
  process the request) is ``TURNED_AWAY``; a 5xx, or a response whose body broke
  off, is ``BROKEN`` (whatever error the SDK makes of it is not the server's
  answer); any other response is ``SENT``, and a JSON-RPC error in it is the
  server's own.

A key nobody recorded is ``SENT``: what is not known not to have been delivered
may have been.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from enum import StrEnum
from typing import Any

import anyio
import httpx2
import mcp.types as mt
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from anyio.streams.text import TextReceiveStream
from mcp.shared.message import SessionMessage

__all__ = [
    "IDEMPOTENCY_KEY_META",
    "Deliveries",
    "Sent",
    "key_of",
    "recording_http_client",
    "stdio_transport",
]

IDEMPOTENCY_KEY_META = "agent-gate/idempotency-key"
"""The ``_meta`` key under which each upstream call carries the gate's stable
idempotency key (the same across attempts of one call), for servers that dedupe;
the transports here follow each request by it."""
_EXIT_GRACE = 2.0
"""Seconds an upstream has to exit once its stdin is closed, then again after SIGTERM."""


class Sent(StrEnum):
    """How far one ``tools/call`` request got towards the upstream."""

    NOT_SENT = "not_sent"
    """Never handed to the upstream: it cannot have run."""
    SENT = "sent"
    """Handed over: the upstream may have run it, whatever comes back."""
    TURNED_AWAY = "turned_away"
    """HTTP 404: the upstream did not know the session and processed nothing."""
    BROKEN = "broken"
    """HTTP: handed over, and the answer broke off (5xx, a body cut short)."""


class Deliveries:
    """What became of each ``tools/call`` request in flight, by idempotency key."""

    def __init__(self) -> None:
        self._seen: dict[str, Sent] = {}
        self.sessioned = False
        """The HTTP server gave the connection a session id: the SDK's client then
        opens the session's standalone GET stream, without waiting for it."""
        self.standalone = anyio.Event()
        """Set once that GET was answered (opened, refused or failed)."""

    def expect(self, key: str) -> None:
        """A request with ``key`` is about to be sent: not sent until a transport says."""
        self._seen[key] = Sent.NOT_SENT

    def mark(self, key: str | None, sent: Sent) -> None:
        if key is not None and key in self._seen:
            self._seen[key] = sent

    def take(self, key: str) -> Sent:
        """How far the request with ``key`` got (``SENT`` when nobody recorded it)."""
        return self._seen.pop(key, Sent.SENT)


def key_of(message: Any) -> str | None:
    """The idempotency key of a ``tools/call`` request (a model or its JSON), if any."""
    if isinstance(message, mt.JSONRPCRequest):
        method, params = message.method, message.params
    elif isinstance(message, Mapping):
        method, params = message.get("method"), message.get("params")
    else:
        return None
    if method != "tools/call" or not isinstance(params, Mapping):
        return None
    meta = params.get("_meta")
    key = meta.get(IDEMPOTENCY_KEY_META) if isinstance(meta, Mapping) else None
    return key if isinstance(key, str) else None


# ------------------------------------------------------------ stdio


@asynccontextmanager
async def stdio_transport(
    command: Sequence[str], env: Mapping[str, str], wire: Deliveries, lost: anyio.Event
) -> AsyncIterator[tuple[MemoryObjectReceiveStream[SessionMessage | Exception],
                         MemoryObjectSendStream[SessionMessage]]]:
    """The upstream ``command`` started in its own process group, as a session's
    streams; ``lost`` is set when its stdout ends or a write to it fails.

    ``OSError`` when the command cannot be started (not found, not executable).
    The server's stderr is the proxy's. On exit: stdin closed, then SIGTERM, then
    SIGKILL to its group, each after a bounded wait.
    """
    stdin = _Stdin.pipe()
    try:
        process = await anyio.open_process(list(command), stdin=stdin.child_end,
                                           env=dict(env), stderr=None, start_new_session=True)
    except BaseException:
        stdin.close()
        raise
    finally:
        stdin.started()
    to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_server, from_session = anyio.create_memory_object_stream[SessionMessage](0)

    async def read() -> None:
        assert process.stdout is not None
        buffer = ""
        async with to_session:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError,
                                     OSError):
                async for chunk in TextReceiveStream(process.stdout, encoding="utf-8",
                                                     errors="replace"):
                    lines = (buffer + chunk).split("\n")
                    buffer = lines.pop()
                    for line in lines:
                        if line.strip():
                            await to_session.send(_parse(line))
            lost.set()

    async def write() -> None:
        async with from_session:
            async for message in from_session:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                line = (data + "\n").encode("utf-8")
                written = await stdin.send(line)
                if written:  # in a pipe something read: the server may have run it
                    wire.mark(key_of(message.message), Sent.SENT)
                if written < len(line):
                    lost.set()  # nothing reads the pipe: this request (or its end) and
                    to_session.close()  # any later never left
                    return

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        tg.start_soon(write)
        try:
            yield from_server, to_server
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process, stdin)
            tg.cancel_scope.cancel()


def _parse(line: str) -> SessionMessage | Exception:
    try:
        return SessionMessage(mt.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:  # not JSON-RPC: the session reports it as a stream error
        return exc


class _Stdin:
    """The write end of the server's stdin pipe, written with ``os.write``.

    Why not the event loop's pipe transport (``anyio.open_process``'s ``stdin``): on
    asyncio, a write to a pipe nobody reads does not raise. The transport logs the
    ``EPIPE``, drops the bytes and closes itself, and the drain after it returns
    before the loss is reported, so a request written to a server that had just died
    looked sent and its call went in doubt (issue 31); a transport already closing
    drops a write just as quietly. ``os.write`` on a non-blocking pipe answers each
    write exactly: how many bytes went in, or ``EPIPE`` when nothing reads the pipe.
    """

    def __init__(self, child_end: int, fd: int) -> None:
        self.child_end: int | None = child_end
        """The read end, the server's stdin; closed here once the server has it."""
        self.fd: int | None = fd

    @classmethod
    def pipe(cls) -> _Stdin:
        child_end, fd = os.pipe()  # neither inherited by the server but as its stdin
        os.set_blocking(fd, False)
        return cls(child_end, fd)

    def started(self) -> None:
        """The server holds the read end (or never will): only it may read the pipe."""
        if self.child_end is not None:
            os.close(self.child_end)
            self.child_end = None

    async def send(self, data: bytes) -> int:
        """Writes ``data``: how many of its bytes went into the pipe, all of them unless
        nothing reads it any more or it was closed here."""
        view, done = memoryview(data), 0
        while done < len(view) and self.fd is not None:
            try:
                done += os.write(self.fd, view[done:])
            except BlockingIOError:  # the pipe is full: the server has not read yet
                try:
                    await anyio.wait_writable(self.fd)
                except anyio.ClosedResourceError:  # closed here while waiting
                    break
            except OSError:  # EPIPE: no reader left
                break
        return done

    def close(self) -> None:
        """The server reads end of file; a writer waiting on the pipe stops."""
        self.started()
        if self.fd is not None:
            fd, self.fd = self.fd, None
            anyio.notify_closing(fd)
            os.close(fd)


async def _stop(process: Process, stdin: _Stdin) -> None:
    """Close the server's stdin and wait, then SIGTERM, then SIGKILL its process group."""
    stdin.close()
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if sys.platform == "win32":  # pragma: no cover - no process groups
                    process.kill()
                else:
                    os.killpg(process.pid, sig)
        with anyio.move_on_after(_EXIT_GRACE):
            await process.wait()
        if process.returncode is not None:
            break
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(Exception):
                await stream.aclose()


# ------------------------------------------------------------ Streamable HTTP


class _Recording(httpx2.AsyncBaseTransport):
    """An HTTP transport that records, for each ``tools/call`` POST, how far it got."""

    def __init__(
        self, inner: httpx2.AsyncBaseTransport, wire: Deliveries, lost: anyio.Event
    ) -> None:
        self.inner = inner
        self.wire = wire
        self.lost = lost

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET":
            try:
                return await self._handle(request)
            finally:
                self.wire.standalone.set()
        response = await self._handle(request)
        if response.headers.get("mcp-session-id"):
            self.wire.sessioned = True
        return response

    async def _handle(self, request: httpx2.Request) -> httpx2.Response:
        key = _body_key(request)
        try:
            response = await self.inner.handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout):
            self.lost.set()  # nothing was sent on a connection never opened
            raise
        except BaseException:
            self.wire.mark(key, Sent.BROKEN)
            raise
        if response.status_code == 404:
            self.wire.mark(key, Sent.TURNED_AWAY)
            self.lost.set()  # the server forgot the session: a new one is needed
        elif response.status_code >= 500:
            self.wire.mark(key, Sent.BROKEN)
        else:
            self.wire.mark(key, Sent.SENT)
            if key is not None:
                response.stream = _Watched(response.stream, self.wire, key)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            response.stream = _SoonRetry(response.stream)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Watched(httpx2.AsyncByteStream):
    """A response body that marks its request ``BROKEN`` if it breaks off."""

    def __init__(self, inner: Any, wire: Deliveries, key: str) -> None:
        self.inner, self.wire, self.key = inner, wire, key

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.inner:
                yield chunk
        except Exception:
            self.wire.mark(self.key, Sent.BROKEN)
            raise

    async def aclose(self) -> None:
        await self.inner.aclose()


RECONNECT_MS = 10
"""The ``retry`` the proxy's own upstream connection reconnects after (milliseconds)."""


class _SoonRetry(httpx2.AsyncByteStream):
    """An SSE body whose ``retry`` fields say ``RECONNECT_MS``.

    A server that closes a request's stream mid-call (SEP-1699 polling) names in
    ``retry`` how long a client should wait before it resumes; the SDK's client waits
    it out (the conformance server says 5 s). The proxy has a client waiting on that
    call, and resuming sooner only asks the server for the events it keeps: so the
    proxy resumes at once instead of holding its client for the server's pause. Only
    whole ``retry:`` lines are rewritten (a line is passed on once its end is read);
    every other byte goes through as it came."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = b""
        async for chunk in self.inner:
            pending += chunk
            cut = max(pending.rfind(b"\n"), pending.rfind(b"\r"))
            if cut < 0:
                continue
            whole, pending = pending[:cut + 1], pending[cut + 1:]
            yield _retry_lines(whole)
        if pending:
            yield _retry_lines(pending)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _retry_lines(data: bytes) -> bytes:
    """``data`` with each line that is a ``retry`` field set to ``RECONNECT_MS``."""
    if b"retry:" not in data:
        return data
    out: list[bytes] = []
    for line in data.splitlines(keepends=True):
        body = line.rstrip(b"\r\n")
        if body.startswith(b"retry:") and body[6:].strip().isdigit():
            line = b"retry: %d" % RECONNECT_MS + line[len(body):]
        out.append(line)
    return b"".join(out)


def _body_key(request: httpx2.Request) -> str | None:
    if request.method != "POST":
        return None
    try:
        return key_of(json.loads(request.content))
    except (ValueError, httpx2.RequestNotRead):
        return None


def recording_http_client(wire: Deliveries, lost: anyio.Event) -> httpx2.AsyncClient:
    """An HTTP client for ``streamable_http_client`` with the SDK's timeouts, recording
    into ``wire``; ``lost`` is set when the server cannot be reached or forgot the session."""
    return httpx2.AsyncClient(
        timeout=httpx2.Timeout(30.0, read=300.0),  # the SDK's own client's
        transport=_Recording(httpx2.AsyncHTTPTransport(), wire, lost),
    )
