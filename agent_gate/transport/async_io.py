"""The asyncio I/O layer: a caller's ``httpx.AsyncClient`` in, ``ServerSentEvent``s out.

The same session, the same decisions as ``sync_io``; only the waiting differs.
Use the stream as ``async with``: an async generator abandoned by a ``break``
is not closed until it is garbage-collected, and the response would stay open
until then.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any

import httpx

from agent_gate.sse import ServerSentEvent
from agent_gate.transport.config import ReconnectPolicy, StreamLimits
from agent_gate.transport.errors import TruncationReason
from agent_gate.transport.resume import ResumeStrategy
from agent_gate.transport.session import (
    Action,
    Finished,
    Reconnect,
    StreamSession,
    StreamState,
    StreamStats,
    TerminalPredicate,
)
from agent_gate.transport.sync_io import BODY_ERRORS, Clock, build_request, make_session


class AsyncEventStream:
    """The async counterpart of ``EventStream``: ``async with`` it, ``async for`` it."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        session: StreamSession,
        *,
        raise_on_truncation: bool = True,
        on_reconnect: Callable[[Reconnect], None] | None = None,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._client = client
        self._session = session
        self._raise_on_truncation = raise_on_truncation
        self._on_reconnect = on_reconnect
        self._clock = clock
        self._sleep = sleep
        self._gen: AsyncGenerator[ServerSentEvent, None] | None = None
        self._response: httpx.Response | None = None

    @property
    def session(self) -> StreamSession:
        return self._session

    @property
    def state(self) -> StreamState:
        return self._session.state

    @property
    def stats(self) -> StreamStats:
        return self._session.stats

    @property
    def truncation(self) -> TruncationReason | None:
        return self._session.truncation

    def __aiter__(self) -> AsyncIterator[ServerSentEvent]:
        if self._gen is not None:
            raise RuntimeError("an AsyncEventStream can be iterated only once")
        self._gen = self._run()
        return self._gen

    async def aclose(self) -> None:
        gen = self._gen
        if gen is not None:
            await gen.aclose()
        response, self._response = self._response, None
        if response is not None:
            await response.aclose()
        self._session.close()

    async def __aenter__(self) -> AsyncEventStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _run(self) -> AsyncGenerator[ServerSentEvent, None]:
        session = self._session
        clock = self._clock
        try:
            while True:
                spec = session.begin_connection(clock())
                read_timeout = session.read_timeout(self._client.timeout.read)
                request = build_request(self._client, spec, read_timeout)
                action: Action | None = None
                try:
                    response = await self._client.send(request, stream=True)
                except httpx.TimeoutException as exc:
                    now = clock()
                    if isinstance(exc, httpx.ReadTimeout) and read_timeout is not None:
                        action = session.stalled(now, session.read_timed_out(now, read_timeout))
                    else:
                        action = session.connect_failed(now, type(exc).__name__)
                except httpx.TransportError as exc:
                    action = session.connect_failed(clock(), type(exc).__name__)
                else:
                    self._response = response
                    chunks: AsyncIterator[bytes] | None = None
                    try:
                        action = await self._head(response)
                        if action is None:
                            chunks = response.aiter_bytes()
                        while chunks is not None and action is None:
                            try:
                                chunk = await chunks.__anext__()
                            except StopAsyncIteration:
                                action = session.connection_lost(clock(), "eof")
                                break
                            except httpx.ReadTimeout:
                                now = clock()
                                assert read_timeout is not None
                                action = session.stalled(
                                    now, session.read_timed_out(now, read_timeout)
                                )
                                break
                            except BODY_ERRORS as exc:
                                action = session.connection_lost(clock(), type(exc).__name__)
                                break
                            now = clock()
                            expired = session.expired(now)
                            if expired is not None:
                                action = session.stalled(now, expired)
                                break
                            for event in session.data_received(now, chunk):
                                yield event
                            session.raise_pending()
                            if session.state is StreamState.COMPLETED:
                                action = Finished(StreamState.COMPLETED)
                    finally:
                        self._response = None
                        if chunks is not None:
                            await chunks.aclose()  # type: ignore[attr-defined]
                        await response.aclose()
                if isinstance(action, Finished):
                    if action.state is StreamState.TRUNCATED and self._raise_on_truncation:
                        raise session.truncation_error()
                    return
                assert isinstance(action, Reconnect)
                if self._on_reconnect is not None:
                    self._on_reconnect(action)
                await self._sleep(action.delay)
        finally:
            session.close()

    async def _head(self, response: httpx.Response) -> Action | None:
        status = response.status_code
        body, truncated = b"", False
        if not 200 <= status < 300:
            body, truncated = await _read_bounded(
                response, self._session.limits.max_error_body_bytes
            )
        return self._session.response_started(
            self._clock(), status, response.headers, body, error_body_truncated=truncated
        )


async def _read_bounded(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    buf = bytearray()
    chunks = response.aiter_bytes()
    try:
        async for chunk in chunks:
            buf += chunk
            if len(buf) > limit:
                return bytes(buf[:limit]), True
    except BODY_ERRORS:
        pass
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
    return bytes(buf), False


def astream_events(
    client: httpx.AsyncClient,
    method: str,
    url: str | httpx.URL,
    *,
    is_terminal: TerminalPredicate,
    headers: Mapping[str, str] | None = None,
    params: Mapping[str, str] | None = None,
    content: bytes | None = None,
    json: Any = None,
    limits: StreamLimits | None = None,
    reconnect: ReconnectPolicy | None = None,
    resume: ResumeStrategy | None = None,
    resumable: bool = False,
    last_event_id: str = "",
    raise_on_truncation: bool = True,
    on_reconnect: Callable[[Reconnect], None] | None = None,
    clock: Clock = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: random.Random | None = None,
) -> AsyncEventStream:
    """Async ``stream_events``: same arguments and rules, an ``httpx.AsyncClient``."""
    session = make_session(
        method,
        url,
        is_terminal=is_terminal,
        headers=headers,
        params=params,
        content=content,
        json=json,
        limits=limits,
        reconnect=reconnect,
        resume=resume,
        resumable=resumable,
        last_event_id=last_event_id,
        rng=rng,
    )
    return AsyncEventStream(
        client,
        session,
        raise_on_truncation=raise_on_truncation,
        on_reconnect=on_reconnect,
        clock=clock,
        sleep=sleep,
    )
