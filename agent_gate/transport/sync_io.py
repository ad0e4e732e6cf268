"""The blocking I/O layer: a caller's ``httpx.Client`` in, ``ServerSentEvent``s out.

Thin on purpose: it sends what ``StreamSession`` says, reads bytes, reports
what happened with a timestamp, yields the events and sleeps the delays it is
given. Every judgement is the session's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from types import TracebackType
from typing import Any

import httpx

from agent_gate.sse import ServerSentEvent
from agent_gate.transport.config import ReconnectPolicy, StreamLimits
from agent_gate.transport.errors import TruncationReason
from agent_gate.transport.resume import ResumeStrategy, StreamRequest
from agent_gate.transport.session import (
    Action,
    Finished,
    Reconnect,
    StreamSession,
    StreamState,
    StreamStats,
    TerminalPredicate,
)

Clock = Callable[[], float]

# Connection-level failures after the response head: the body broke or ended early.
BODY_ERRORS: tuple[type[Exception], ...] = (httpx.TransportError, httpx.DecodingError)


def build_request(
    client: httpx.Client | httpx.AsyncClient, spec: StreamRequest, read_timeout: float | None
) -> httpx.Request:
    """Build with the caller's client so its base URL, default headers and cookies apply.

    The read timeout is lowered to the stream's limits (see
    ``StreamSession.read_timeout``); connect, write and pool timeouts stay the
    client's own.
    """
    headers = dict(spec.headers)
    lowered = {k.lower() for k in headers}
    if "accept" not in lowered:
        headers["Accept"] = "text/event-stream"
    if "cache-control" not in lowered:
        headers["Cache-Control"] = "no-cache"
    base = client.timeout
    timeout = httpx.Timeout(
        connect=base.connect, read=read_timeout, write=base.write, pool=base.pool
    )
    kwargs: dict[str, Any] = {"headers": headers, "timeout": timeout}
    if spec.params:
        kwargs["params"] = dict(spec.params)
    if spec.content is not None:
        kwargs["content"] = spec.content
    elif spec.json is not None:
        kwargs["json"] = spec.json
    return client.build_request(spec.method, spec.url, **kwargs)


def make_session(
    method: str,
    url: str | httpx.URL,
    *,
    is_terminal: TerminalPredicate,
    headers: Mapping[str, str] | None,
    params: Mapping[str, str] | None,
    content: bytes | None,
    json: Any,
    limits: StreamLimits | None,
    reconnect: ReconnectPolicy | None,
    resume: ResumeStrategy | None,
    resumable: bool,
    last_event_id: str,
    rng: random.Random | None,
) -> StreamSession:
    spec = StreamRequest(
        method.upper(),
        str(url),
        headers=dict(headers or {}),
        params=dict(params or {}),
        content=content,
        json=json,
    )
    return StreamSession(
        spec,
        is_terminal=is_terminal,
        limits=limits,
        policy=reconnect,
        strategy=resume,
        resumable=resumable,
        last_event_id=last_event_id,
        rng=rng,
    )


class EventStream:
    """An iterable of events over one logical stream, reconnects included.

    Iterate it once; use it as a context manager (or call ``close``) so the
    response is closed even when iteration stops early. After iteration,
    ``state`` says how it ended: COMPLETED only when the caller's terminal
    event arrived. With ``raise_on_truncation=False`` a truncated stream ends
    iteration quietly with ``state`` TRUNCATED and ``truncation`` set, instead
    of raising ``StreamTruncatedError``.
    """

    def __init__(
        self,
        client: httpx.Client,
        session: StreamSession,
        *,
        raise_on_truncation: bool = True,
        on_reconnect: Callable[[Reconnect], None] | None = None,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self._session = session
        self._raise_on_truncation = raise_on_truncation
        self._on_reconnect = on_reconnect
        self._clock = clock
        self._sleep = sleep
        self._gen: Generator[ServerSentEvent, None, None] | None = None
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

    def __iter__(self) -> Iterator[ServerSentEvent]:
        if self._gen is not None:
            raise RuntimeError("an EventStream can be iterated only once")
        self._gen = self._run()
        return self._gen

    def close(self) -> None:
        gen = self._gen
        if gen is not None:
            gen.close()
        response, self._response = self._response, None
        if response is not None:
            response.close()
        self._session.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the loop -------------------------------------------------------------

    def _run(self) -> Generator[ServerSentEvent, None, None]:
        session = self._session
        try:
            while True:
                spec = session.begin_connection(self._clock())
                action = yield from self._connection(spec)
                if isinstance(action, Finished):
                    if action.state is StreamState.TRUNCATED and self._raise_on_truncation:
                        raise session.truncation_error()
                    return
                if self._on_reconnect is not None:
                    self._on_reconnect(action)
                self._sleep(action.delay)
        finally:
            session.close()

    def _connection(self, spec: StreamRequest) -> Generator[ServerSentEvent, None, Action]:
        session = self._session
        clock = self._clock
        read_timeout = session.read_timeout(self._client.timeout.read)
        request = build_request(self._client, spec, read_timeout)
        try:
            response = self._client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            if isinstance(exc, httpx.ReadTimeout) and read_timeout is not None:
                now = clock()
                return session.stalled(now, session.read_timed_out(now, read_timeout))
            return session.connect_failed(clock(), type(exc).__name__)
        except httpx.TransportError as exc:
            return session.connect_failed(clock(), type(exc).__name__)
        self._response = response
        try:
            action = self._head(response)
            if action is not None:
                return action
            chunks = response.iter_bytes()
            while True:
                try:
                    chunk = next(chunks)
                except StopIteration:
                    return session.connection_lost(clock(), "eof")
                except httpx.ReadTimeout:
                    now = clock()
                    assert read_timeout is not None
                    return session.stalled(now, session.read_timed_out(now, read_timeout))
                except BODY_ERRORS as exc:
                    return session.connection_lost(clock(), type(exc).__name__)
                now = clock()
                expired = session.expired(now)
                if expired is not None:
                    return session.stalled(now, expired)
                events = session.data_received(now, chunk)
                yield from events
                session.raise_pending()
                if session.state is StreamState.COMPLETED:
                    return Finished(StreamState.COMPLETED)
        finally:
            self._response = None
            response.close()

    def _head(self, response: httpx.Response) -> Action | None:
        status = response.status_code
        body, truncated = b"", False
        if not 200 <= status < 300:
            body, truncated = _read_bounded(response, self._session.limits.max_error_body_bytes)
        return self._session.response_started(
            self._clock(), status, response.headers, body, error_body_truncated=truncated
        )


def _read_bounded(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of an error body; a broken body yields what arrived."""
    buf = bytearray()
    try:
        for chunk in response.iter_bytes():
            buf += chunk
            if len(buf) > limit:
                return bytes(buf[:limit]), True
    except BODY_ERRORS:
        pass
    return bytes(buf), False


def stream_events(
    client: httpx.Client,
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
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> EventStream:
    """Open an event stream with the caller's client; iterate the result for events.

    ``is_terminal`` is how the caller (who knows the provider) tells the
    transport that the answer is complete; without it a closed connection
    could not be told apart from a finished answer. Nothing is sent until
    iteration starts.

    A dropped connection is resumed with ``resume`` (default: WHATWG
    ``Last-Event-ID``) when the server gave what that needs. A request that is
    not a GET is never sent again unless ``resumable=True`` says that, for this
    endpoint, sending it again with ``Last-Event-ID`` continues the same
    answer; re-sending a ``POST /v1/responses`` would generate a new one.
    """
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
    return EventStream(
        client,
        session,
        raise_on_truncation=raise_on_truncation,
        on_reconnect=on_reconnect,
        clock=clock,
        sleep=sleep,
    )
