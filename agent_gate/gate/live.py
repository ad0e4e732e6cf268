"""A live HTTP event stream through the gate: each complete call run at most once.

The transport (``agent_gate.transport``) repairs the *stream*: it re-subscribes
after a cut with ``Last-Event-ID``. The gate (``agent_gate.gate``) decides about
the *task*: the ledger alone says whether a write runs. This module is the one
place that wires them together, because three details must agree for the
guarantee to hold end to end:

* the transport must stop reading exactly where the provider's protocol says the
  response ended, or a closed connection could be taken for a finished answer.
  The terminal predicate is therefore not a list of event names kept here: it is
  the provider adapter's own verdict (``TerminalDetector``);
* the accumulator that ``Gate.run`` feeds must be told when a new connection
  begins (``Accumulator.reconnected``), so that events the server replays after a
  resume are recognised as replays instead of rejected as conflicting;
* the typed transport error that ended a stream (a refusal, a timeout, a
  truncation) must stay available to the caller, not only as ``RunResult.error``.

``run_live`` / ``arun_live`` do exactly that and return a ``LiveResult``; both
take one ``LiveOptions`` and share all but the call into ``Gate.run`` or
``Gate.arun`` (``_Live``). They never re-send a request that would regenerate an
answer: only a GET (or an endpoint the caller declares ``resumable``) is
re-subscribed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from agent_gate.accumulate import AccumulatorStats, DispatchMode
from agent_gate.autodetect import accumulator
from agent_gate.calls import Terminal
from agent_gate.errors import (
    AgentGateError,
    StreamError,
)
from agent_gate.gate.facade import Gate
from agent_gate.gate.outcome import Outcome, RunResult
from agent_gate.policy import Principal, TaskScope
from agent_gate.sse import ServerSentEvent
from agent_gate.transport import (
    AsyncEventStream,
    EventStream,
    Reconnect,
    StreamOptions,
    StreamStats,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "LiveOptions",
    "LiveProgress",
    "LiveResult",
    "ReconnectInfo",
    "TerminalDetector",
    "arun_live",
    "run_live",
]

DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=None, write=30.0, pool=10.0)
"""For a client ``run_live`` creates itself. The read timeout is left to the
stream's own idle and progress limits (``StreamLimits``), which the transport turns
into the effective read timeout of every request."""


class TerminalDetector:
    """The transport's ``is_terminal`` predicate, answered by the provider adapter.

    The transport asks about each event *before* the gate has seen it, so the
    gate's accumulator cannot answer. A private accumulator of the same provider
    is fed the same events and says whether the response ended there. Gemini (no
    terminal event type, only a ``finishReason`` inside the JSON), Chat
    Completions (a ``finish_reason`` chunk, then ``[DONE]``) and Anthropic
    (``message_stop``, or an ``error`` event) all end where their adapter says,
    with no second list of event names to keep in step.

    An event the private accumulator cannot parse is reported "not terminal":
    the gate's accumulator receives the same event next and raises the same
    error, which ends the run with that error instead of here.
    """

    __slots__ = ("_acc", "_broken")

    def __init__(self, provider: str) -> None:
        # It only judges the end: the turn is the gate's accumulator's to keep.
        self._acc = accumulator(
            provider, dispatch=DispatchMode.ON_RESPONSE_COMPLETE, max_turn_chars=0
        )
        self._broken = False

    def __call__(self, event: ServerSentEvent) -> bool:
        if self._broken:
            return False
        try:
            self._acc.feed(event)
        except AgentGateError:
            self._broken = True
            return False
        return self._acc.terminal is not None

    def reconnected(self) -> None:
        """A new connection begins: events may repeat from here (see ``ReplayGuard``)."""
        self._acc.reconnected()


@dataclass(frozen=True, slots=True)
class ReconnectInfo:
    """One re-subscription, without the request (its headers may carry credentials)."""

    attempt: int
    delay: float
    last_event_id: str
    cause: str
    """Why the previous connection ended: ``eof``, an httpx error class, ``HTTP 503``..."""

    @classmethod
    def of(cls, action: Reconnect) -> ReconnectInfo:
        return cls(action.attempt, action.delay, action.last_event_id, action.cause)


@dataclass(frozen=True, slots=True)
class LiveProgress:
    """Passed to ``on_event`` after the gate handled an event (and ran what it released)."""

    event: ServerSentEvent
    stream: StreamStats
    calls: AccumulatorStats


@dataclass(frozen=True, slots=True)
class LiveResult:
    """What a live run produced: the gate's result and what the stream went through."""

    run: RunResult
    stats: StreamStats
    reconnects: tuple[ReconnectInfo, ...]
    stream_error: StreamError | None
    """The typed transport error that ended the stream early, if one did."""
    calls: AccumulatorStats

    @property
    def outcomes(self) -> tuple[Outcome, ...]:
        return self.run.outcomes

    @property
    def terminal(self) -> Terminal | None:
        return self.run.terminal

    @property
    def error(self) -> str | None:
        return self.run.error

    @property
    def provider(self) -> str | None:
        return self.run.provider

    def next_input(self, provider: str) -> list[dict[str, Any]]:
        """``RunResult.next_input``: the turn and the results for the next request."""
        return self.run.next_input(provider)

    @property
    def completed(self) -> bool:
        """The response reached its successful terminal and the stream raised nothing."""
        terminal = self.run.terminal
        return terminal is not None and terminal.succeeded and self.run.error is None


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveOptions(StreamOptions):
    """``StreamOptions`` plus what a live run adds: the request method and the gate's run.

    ``run_live`` and ``arun_live`` take one of these (or its fields as keywords,
    as they always did). The transport's own ``on_reconnect`` and
    ``raise_on_truncation`` are the live wiring's; ``on_reconnect`` here gets a
    ``ReconnectInfo`` after the wiring noted the reconnect.
    """

    method: str = "GET"
    dispatch: Callable[[str], DispatchMode] | DispatchMode | None = None
    on_event: Callable[[LiveProgress], None] | None = None
    """Runs after each event was handled by the gate, so a display reading the
    ledger then sees the calls that event released already settled."""
    on_reconnect: Callable[[ReconnectInfo], None] | None = None
    principal: Principal | None = None
    """Passed to the gate's run: who the agent acts for (the gate's own by default)."""
    scope: TaskScope | None = None
    """Passed to the gate's run: what the task may touch (the gate's own by default)."""
    on_text: Callable[[str], object] | None = None
    """Passed to the gate's run: the assistant's visible text as it arrives."""


_Stream = TypeVar("_Stream", EventStream, AsyncEventStream)


class _Live:
    """One live run's wiring, the same for the sync and the async run.

    Holds the gate's accumulator and the terminal detector, notes reconnects,
    reports progress, and builds the stream and the result; the two entry points
    only open the client and call ``Gate.run`` or ``Gate.arun``.
    """

    def __init__(
        self, gate: Gate, url: str | httpx.URL, provider: str, task_id: str, options: LiveOptions
    ) -> None:
        self.url = url
        self.options = options
        self.acc = gate.accumulator_for(provider, options.dispatch)
        self.detector = TerminalDetector(provider)
        self.reconnects: list[ReconnectInfo] = []
        self.trace = gate.telemetry.stream(provider=provider, task_id=task_id)
        """The stream's span: the gate runs inside it, so each call's span is its child."""
        self.run_args: dict[str, Any] = {
            "task_id": task_id,
            "provider": provider,
            "dispatch": options.dispatch,
            "accumulator": self.acc,
            "principal": options.principal,
            "scope": options.scope,
            "on_text": options.on_text,
        }

    def open(self, kind: type[_Stream], client: Any) -> _Stream:
        return kind.open(
            client,
            self.options.method,
            self.url,
            is_terminal=self.detector,
            options=self.options,
            on_reconnect=self.reconnected,
            trace=self.trace,
        )

    def reconnected(self, action: Reconnect) -> None:
        # Called by the transport after every event of the old connection was
        # consumed (and handled by the gate), before the new request is sent.
        self.acc.reconnected()
        self.detector.reconnected()
        info = ReconnectInfo.of(action)
        self.reconnects.append(info)
        if self.options.on_reconnect is not None:
            self.options.on_reconnect(info)

    def handled(self, event: ServerSentEvent, stream: EventStream | AsyncEventStream) -> None:
        on_event = self.options.on_event
        if on_event is not None:  # stats are built only for a caller that reads them
            on_event(LiveProgress(event, stream.stats, self.acc.stats))

    def events(self, stream: EventStream) -> Iterator[ServerSentEvent]:
        for event in stream:
            yield event
            self.handled(event, stream)

    async def aevents(self, stream: AsyncEventStream) -> AsyncIterator[ServerSentEvent]:
        async for event in stream:
            yield event
            self.handled(event, stream)

    def result(self, run: RunResult, stream: EventStream | AsyncEventStream) -> LiveResult:
        terminal = run.terminal
        self.trace.result(
            terminal.kind.value if terminal is not None else None,
            self.acc.stats.replayed_events, len(run.outcomes), run.anomalies,
        )
        return LiveResult(run, stream.stats, tuple(self.reconnects), stream.error, self.acc.stats)


def run_live(
    gate: Gate,
    url: str | httpx.URL,
    *,
    provider: str,
    task_id: str,
    client: httpx.Client | None = None,
    options: StreamOptions | None = None,
    **fields: Any,
) -> LiveResult:
    """Stream ``url`` into ``gate.run`` for ``task_id``; reconnects re-subscribe only.

    ``client`` is the caller's ``httpx.Client`` (auth, proxies, timeouts); without
    one a client with ``DEFAULT_TIMEOUT`` is made and closed. ``options`` is a
    ``LiveOptions`` (a plain ``StreamOptions`` is widened to one); its fields are
    accepted as keywords too (``method=``, ``headers=``, ``reconnect=``,
    ``on_event=``, ``principal=``...), set over ``options``.

    Gate and ledger errors propagate; a stream that fails (refusal, wrong media
    type, limit, timeout, truncation) ends the run quietly with every held call
    recorded as not run, and the typed error in ``LiveResult.stream_error``.
    """
    live = _Live(gate, url, provider, task_id, LiveOptions.of(options, fields))
    http = client if client is not None else httpx.Client(timeout=DEFAULT_TIMEOUT)
    try:
        with live.trace.active(), live.open(EventStream, http) as stream:
            return live.result(gate.run(live.events(stream), **live.run_args), stream)
    finally:
        live.trace.close()
        if client is None:
            http.close()


async def arun_live(
    gate: Gate,
    url: str | httpx.URL,
    *,
    provider: str,
    task_id: str,
    options: StreamOptions | None = None,
    client: httpx.AsyncClient | None = None,
    **fields: Any,
) -> LiveResult:
    """``run_live`` for asyncio: an ``httpx.AsyncClient`` and ``Gate.arun`` (async tools)."""
    live = _Live(gate, url, provider, task_id, LiveOptions.of(options, fields))
    http = client if client is not None else httpx.AsyncClient(timeout=DEFAULT_TIMEOUT)
    try:
        with live.trace.active():
            async with live.open(AsyncEventStream, http) as stream:
                result = await gate.arun(live.aevents(stream), **live.run_args)
                return live.result(result, stream)
    finally:
        live.trace.close()
        if client is None:
            await http.aclose()
