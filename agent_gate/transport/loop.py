"""The one stream loop, as a generator of I/O requests: both I/O layers run it.

Why a generator and not two loops: the blocking layer and the asyncio layer
used to be two hand-written copies of the same loop (send, judge the head, read
chunks, check the clock, feed the session, back off, resume), kept in step by
hand. Generating the sync copy from the async one (httpcore's ``unasync``)
would still leave two copies in the tree and a build step to keep them equal.
Here the loop is written once, as a plain generator that performs no I/O: it
yields what must be done next (``Send``, ``READ``, ``CLOSE``, ``Sleep``) and the
events for the caller, and is sent back each result, or thrown the exception
the I/O raised. ``sync_io`` and ``async_io`` only execute those requests, each
with its own client and sleep; every judgement stays ``StreamSession``'s.

Theory of operation::

    begin_connection -> Send(request) -> response head (a non-2xx body via READs)
        -> READ* -> events yielded -> CLOSE -> Finished: return (or raise truncation)
                                           -> Reconnect: on_reconnect, Sleep, again

The executor owns the open response: ``Send`` opens it, ``READ`` reads its
next chunk (``None`` at its end), ``CLOSE`` closes it, and the executor closes
it too when the loop stops early or raises.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, Generic, Self, TypeVar

import httpx

from agent_gate.errors import StreamError, TruncationReason
from agent_gate.sse import ServerSentEvent
from agent_gate.telemetry import StreamTrace, observer
from agent_gate.transport.options import StreamOptions, build_request
from agent_gate.transport.resume import StreamRequest
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


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``request`` with ``stream=True``; the answer is the response, kept open."""

    request: httpx.Request


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``delay`` seconds before the next connection."""

    delay: float


class Signal(Enum):
    READ = "read"
    """The next chunk of the open response's body, or ``None`` at its end."""
    CLOSE = "close"
    """Close the open response (if the last ``Send`` opened one)."""


READ = Signal.READ
CLOSE = Signal.CLOSE

IORequest = Send | Sleep | Signal
Step = IORequest | ServerSentEvent
Loop = Generator[Step, Any, None]


def stream_loop(
    session: StreamSession,
    client: httpx.Client | httpx.AsyncClient,
    *,
    clock: Clock,
    raise_on_truncation: bool,
    on_reconnect: Callable[[Reconnect], None] | None,
    trace: StreamTrace | None = None,
) -> Loop:
    """Every connection of one logical stream, reconnects included; ``trace`` is told
    of each reconnect and of the end. Without one the loop opens (and closes) its own:
    a stream read on its own has a span of its own."""
    owned = trace is None
    if trace is None:
        trace = observer().stream(provider=None)
    error: BaseException | None = None
    try:
        while True:
            spec = session.begin_connection(clock())
            action = yield from _connection(session, client, spec, clock)
            yield CLOSE
            if isinstance(action, Finished):
                if action.state is StreamState.TRUNCATED and raise_on_truncation:
                    raise session.truncation_error()
                return
            trace.reconnect(action.attempt, action.delay, action.cause, action.last_event_id)
            if on_reconnect is not None:
                on_reconnect(action)
            yield Sleep(action.delay)
    except Exception as exc:
        error = exc
        raise
    finally:
        session.close()
        trace.ended(session.stats, error)
        if owned:
            trace.close()


def _connection(
    session: StreamSession,
    client: httpx.Client | httpx.AsyncClient,
    spec: StreamRequest,
    clock: Clock,
) -> Generator[Step, Any, Action]:
    read_timeout = session.read_timeout(client.timeout.read)
    try:
        response: httpx.Response = yield Send(build_request(client, spec, read_timeout))
    except httpx.TimeoutException as exc:
        if isinstance(exc, httpx.ReadTimeout) and read_timeout is not None:
            return _read_timed_out(session, clock(), read_timeout)
        return session.connect_failed(clock(), type(exc).__name__)
    except httpx.TransportError as exc:
        return session.connect_failed(clock(), type(exc).__name__)
    status = response.status_code
    body, truncated = b"", False
    if not 200 <= status < 300:
        body, truncated = yield from _error_body(session.limits.max_error_body_bytes)
    action = session.response_started(
        clock(), status, response.headers, body, error_body_truncated=truncated
    )
    if action is not None:
        return action
    while True:
        try:
            chunk: bytes | None = yield READ
        except httpx.ReadTimeout:
            assert read_timeout is not None
            return _read_timed_out(session, clock(), read_timeout)
        except BODY_ERRORS as exc:
            return session.connection_lost(clock(), type(exc).__name__)
        if chunk is None:
            return session.connection_lost(clock(), "eof")
        now = clock()
        expired = session.expired(now)
        if expired is not None:
            return session.stalled(now, expired)
        yield from session.data_received(now, chunk)
        session.raise_pending()
        if session.state is StreamState.COMPLETED:
            return Finished(StreamState.COMPLETED)


def _read_timed_out(session: StreamSession, now: float, read_timeout: float) -> Action:
    return session.stalled(now, session.read_timed_out(now, read_timeout))


def _error_body(limit: int) -> Generator[Step, Any, tuple[bytes, bool]]:
    """At most ``limit`` bytes of an error body; a broken body yields what arrived."""
    buf = bytearray()
    while len(buf) <= limit:
        try:
            chunk: bytes | None = yield READ
        except BODY_ERRORS:
            break
        if chunk is None:
            break
        buf += chunk
    return bytes(buf[:limit]), len(buf) > limit


class Exchange:
    """Steps a loop: hands each I/O answer, or the exception the I/O raised, back in.

    Remembers the ``StreamError`` that ended the loop, if one did, so a caller
    that handed the stream to someone else (``run_live`` to ``Gate.run``) still
    has the typed error.
    """

    __slots__ = ("_answer", "_error", "_loop", "error")

    def __init__(self, loop: Loop) -> None:
        self._loop = loop
        self._answer: Any = None
        self._error: Exception | None = None
        self.error: StreamError | None = None

    def __iter__(self) -> Exchange:
        return self

    def __next__(self) -> Step:
        answer, error = self._answer, self._error
        self._answer = self._error = None
        try:
            return self._loop.send(answer) if error is None else self._loop.throw(error)
        except StreamError as exc:
            self.error = exc
            raise

    def answer(self, perform: Callable[[IORequest], Any], request: IORequest) -> None:
        try:
            self._answer = perform(request)
        except Exception as exc:  # the loop decides what an I/O failure means
            self._error = exc

    async def aanswer(
        self, perform: Callable[[IORequest], Awaitable[Any]], request: IORequest
    ) -> None:
        try:
            self._answer = await perform(request)
        except Exception as exc:  # the loop decides what an I/O failure means
            self._error = exc

    def close(self) -> None:
        self._loop.close()


ClientT = TypeVar("ClientT", httpx.Client, httpx.AsyncClient)


class StreamBase(Generic[ClientT]):
    """What ``EventStream`` and ``AsyncEventStream`` share: all but executing the I/O.

    After iteration, ``state`` says how the stream ended: COMPLETED only when
    the caller's terminal event arrived. With ``raise_on_truncation=False`` a
    truncated stream ends iteration quietly with ``state`` TRUNCATED and
    ``truncation`` set, instead of raising ``StreamTruncatedError``.
    """

    default_sleep: ClassVar[Callable[[float], Any]]
    _response: httpx.Response | None = None
    """The open response of the current connection: the executor's to close."""

    def __init__(
        self,
        client: ClientT,
        session: StreamSession,
        *,
        raise_on_truncation: bool = True,
        on_reconnect: Callable[[Reconnect], None] | None = None,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], Any] | None = None,
        trace: StreamTrace | None = None,
    ) -> None:
        self._client = client
        self._session = session
        self._sleep = sleep if sleep is not None else type(self).default_sleep
        self._exchange = Exchange(
            stream_loop(
                session,
                client,
                clock=clock,
                raise_on_truncation=raise_on_truncation,
                on_reconnect=on_reconnect,
                trace=trace,
            )
        )
        self._started = False

    @classmethod
    def open(
        cls,
        client: ClientT,
        method: str,
        url: str | httpx.URL,
        *,
        is_terminal: TerminalPredicate,
        options: StreamOptions | None = None,
        raise_on_truncation: bool = True,
        on_reconnect: Callable[[Reconnect], None] | None = None,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], Any] | None = None,
        trace: StreamTrace | None = None,
        **overrides: Any,
    ) -> Self:
        """Open an event stream with the caller's client; iterate the result for events.

        ``is_terminal`` is how the caller (who knows the provider) tells the
        transport that the answer is complete; without it a closed connection
        could not be told apart from a finished answer. Nothing is sent until
        iteration starts. ``options`` (a ``StreamOptions``) says what to send and
        how to resume; its fields are accepted as keywords too (``headers=``,
        ``limits=``, ``reconnect=``...), set over ``options``.

        A dropped connection is resumed with ``resume`` (default: WHATWG
        ``Last-Event-ID``) when the server gave what that needs. A request that is
        not a GET is never sent again unless ``resumable=True`` says that, for this
        endpoint, sending it again with ``Last-Event-ID`` continues the same
        answer; re-sending a ``POST /v1/responses`` would generate a new one.
        ``sleep`` waits between connections (``time.sleep``, or ``asyncio.sleep``
        for the async stream); ``clock`` and ``sleep`` are injectable for tests.
        ``trace`` (``agent_gate.telemetry.StreamTrace``): where the stream's span,
        reconnects and end are told, for a caller that holds it (``run_live``);
        without one the stream opens and ends a span of its own.
        """
        session = StreamOptions.of(options, overrides).session(method, url, is_terminal)
        return cls(
            client,
            session,
            raise_on_truncation=raise_on_truncation,
            on_reconnect=on_reconnect,
            clock=clock,
            sleep=sleep,
            trace=trace,
        )

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

    @property
    def error(self) -> StreamError | None:
        """The typed transport error that ended iteration, if one did."""
        return self._exchange.error

    def _start(self) -> Exchange:
        """The exchange to run, once: a second iteration would resend the request."""
        if self._started:
            raise RuntimeError(f"an {type(self).__name__} can be iterated only once")
        self._started = True
        return self._exchange
