"""Turning a provider's stream into tool calls known to be complete.

The accumulator owns the two innermost boundaries of DESIGN.md's table: *tool
call* (the provider's argument-completion signal arrived) and *task* (the
response's terminal state). Adapters translate each wire protocol into the
normalized events of ``agent_gate.providers.events``; this module applies one
set of rules to all of them:

* a call's arguments are frozen only at its completion signal and parsed once,
  strictly (``json.loads`` semantics, object required, no duplicate keys, no
  NaN, no lone surrogates); nothing is ever repaired;
* anything that breaks correlation (a delta after completion, a second start
  with different content, a completion text that disagrees with the deltas,
  concatenated JSON values, a reused index) rejects the call, never runs it;
* a call is released exactly once: as soon as it completes when its tool's
  dispatch mode is ``ON_CALL_COMPLETE``, otherwise when the response ends;
* the end of the transport without a terminal event is ``truncated``, and calls
  still open at any terminal that is not a success are ``incomplete``.

It is sans-IO: no sockets, no clock, no threads. Feed it events, read calls.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any

from agent_gate._speedups import PURE_PYTHON
from agent_gate.calls import JSON_CALL_KINDS, CallStatus, Terminal, TerminalKind, ToolCall
from agent_gate.errors import (
    AccumulatorClosedError,
    AccumulatorLimitExceeded,
    StrictParseError,
    UnrecognizedStream,
    safe_name,
)
from agent_gate.known_path import KnownPath
from agent_gate.plainjson import MAX_ARGUMENT_DEPTH
from agent_gate.providers import events as ev
from agent_gate.providers.base import ProviderAdapter, WireEvent
from agent_gate.providers.registry import ADAPTERS, adapter_for
from agent_gate.providers.replay import DEFAULT_MAX_REPLAY_POSITIONS, ReplayGuard
from agent_gate.sse import SSEDecoder, SSELimitExceeded
from agent_gate.strict_json import parse_arguments
from agent_gate.turn import DEFAULT_MAX_TURN_CHARS, Turn, TurnRecorder

DEFAULT_MAX_CALLS = 256
DEFAULT_MAX_CALL_ARGUMENT_BYTES = 1024 * 1024
DEFAULT_MAX_TOTAL_ARGUMENT_BYTES = 16 * 1024 * 1024
_MAX_UNKNOWN_TYPES = 64
_KNOWN_ADAPTER_PATH = not PURE_PYTHON
"""Whether the built-in adapters take ``Accumulator._feed_known`` (see ``_speedups``)."""


class DispatchMode(StrEnum):
    """When a complete call is handed over, chosen per tool."""

    ON_CALL_COMPLETE = "on_call_complete"
    """As soon as the call's own completion signal arrives: lowest latency, for reads."""
    ON_RESPONSE_COMPLETE = "on_response_complete"
    """Only when the response ended: the safe default for writes."""


UNRECOGNIZED_LIMIT = 8
"""Events of a type the adapter does not know, with none it does know before them,
after which the stream is judged not to be of the chosen protocol at all."""


@dataclass(frozen=True, slots=True)
class Anomaly:
    """A protocol violation seen in the stream; ``reason`` is an identifier, never payload."""

    event_index: int
    reason: str
    call_id: str | None = None
    after_release: bool = False
    """True when the call had already been handed over: the gate must know."""


@dataclass(frozen=True, slots=True)
class AccumulatorStats:
    """Counters for diagnostics; no payload, only counts and event type names."""

    events: int
    progress_events: int
    """Events that changed something (heartbeats, unknown types and replays do not)."""
    heartbeats: int
    unknown_events: int
    unknown_types: Mapping[str, int]
    replayed_events: int
    events_after_terminal: int
    calls: int
    released: int
    anomalies: int
    argument_bytes: int
    text_chars: int


class _Phase(Enum):
    """Where one call is: receiving, decided (waiting for release), handed over."""

    OPEN = "open"
    SETTLED = "settled"
    RELEASED = "released"


@dataclass(slots=True)
class _Call:
    call_id: str
    name: str
    index: int
    kind: str
    phase: _Phase = _Phase.OPEN
    parts: list[str] = field(default_factory=list)
    size: int = 0
    snapshot: str | None = None
    outcome: ToolCall | None = None


def _always_after_response(_name: str) -> DispatchMode:
    return DispatchMode.ON_RESPONSE_COMPLETE


class Accumulator(KnownPath):
    """Correlates one response's events into complete tool calls and a terminal state.

    ``provider`` is a registered name (a fresh adapter is made) or an adapter
    instance. ``dispatch`` maps a tool name to its ``DispatchMode`` (or is one
    mode for every tool); the default holds every call until the response ends.
    A call whose arguments nest deeper than ``max_argument_depth`` is rejected
    (``arguments_too_deep``) and its siblings go on. ``max_replay_positions``
    bounds the replay guard's memory (``agent_gate.providers.replay``).
    The assistant's turn is kept for the next request (``turn``) up to
    ``max_turn_chars`` (``agent_gate.turn``); ``listen_text`` hands each fragment
    of visible text to a listener as it is applied.
    """

    def __init__(
        self,
        provider: str | ProviderAdapter,
        *,
        dispatch: Callable[[str], DispatchMode] | DispatchMode | None = None,
        max_calls: int = DEFAULT_MAX_CALLS,
        max_call_argument_bytes: int = DEFAULT_MAX_CALL_ARGUMENT_BYTES,
        max_total_argument_bytes: int = DEFAULT_MAX_TOTAL_ARGUMENT_BYTES,
        max_argument_depth: int = MAX_ARGUMENT_DEPTH,
        max_replay_positions: int = DEFAULT_MAX_REPLAY_POSITIONS,
        max_turn_chars: int = DEFAULT_MAX_TURN_CHARS,
    ) -> None:
        self._adapter = adapter_for(provider) if isinstance(provider, str) else provider
        # The short path (``_feed_known``) mirrors the built-in adapters' decode and
        # replay key; a subclass may have changed either, so it always takes the long
        # way, and so does every adapter with AGENT_GATE_PURE_PYTHON=1.
        self._fast = _KNOWN_ADAPTER_PATH and type(self._adapter) in ADAPTERS.values()
        self._sequence_field = self._adapter.sequence_field
        # A typed decode of the dominant event (``ProviderAdapter.hot_decode``), which
        # holds the sequence field too when the adapter has one.
        self._hot_decode = self._adapter.hot_decode if self._fast else None
        self._hot_marker = self._adapter.hot_marker
        if dispatch is None:
            self._dispatch: Callable[[str], DispatchMode] = _always_after_response
        elif isinstance(dispatch, DispatchMode):
            mode = dispatch
            self._dispatch = lambda _name: mode
        else:
            self._dispatch = dispatch
        self._max_calls = max_calls
        self._max_call_bytes = max_call_argument_bytes
        self._max_total_bytes = max_total_argument_bytes
        self._max_depth = max_argument_depth
        self._calls: dict[str, _Call] = {}
        self._settle_order: list[_Call] = []
        self._replay = ReplayGuard(max_replay_positions, sequence_field=self._sequence_field)
        self._terminal: Terminal | None = None
        self._closed = False
        self._anomalies: list[Anomaly] = []
        self._events = 0
        self._progress = 0
        self._heartbeats = 0
        self._unknown = 0
        self._unknown_types: Counter[str] = Counter()
        self._replayed = 0
        self._after_terminal = 0
        self._released = 0
        self._argument_bytes = 0
        self._text_chars = 0
        self._turn = TurnRecorder(max_turn_chars)
        self._on_text: Callable[[str], object] | None = None

    @property
    def _index(self) -> int:
        """The index of the event being applied (the last one fed, after ``close``)."""
        return max(self._events - 1, 0)

    # -- public API ----------------------------------------------------------

    @property
    def provider(self) -> str:
        return self._adapter.name

    @property
    def terminal(self) -> Terminal | None:
        """How the response ended; ``None`` until a terminal event or ``close()``."""
        return self._terminal

    @property
    def anomalies(self) -> tuple[Anomaly, ...]:
        return tuple(self._anomalies)

    @property
    def stats(self) -> AccumulatorStats:
        return AccumulatorStats(
            events=self._events,
            progress_events=self._progress,
            heartbeats=self._heartbeats,
            unknown_events=self._unknown,
            unknown_types=dict(self._unknown_types),
            replayed_events=self._replayed,
            events_after_terminal=self._after_terminal,
            calls=len(self._calls),
            released=self._released,
            anomalies=len(self._anomalies),
            argument_bytes=self._argument_bytes,
            text_chars=self._text_chars,
        )

    @property
    def turn(self) -> Turn:
        """The assistant's turn so far, each call's piece bound to its settled call."""
        return self._turn.turn(
            self._adapter.name, {cid: c.outcome for cid, c in self._calls.items()}
        )

    def listen_text(self, on_text: Callable[[str], object] | None) -> None:
        """Call ``on_text`` with each fragment of visible assistant text as it is
        applied (a UI streams it while the calls are held); None stops."""
        self._on_text = on_text

    def reconnected(self) -> None:
        """Tell the replay guard a new connection begins (events may repeat from here)."""
        self._replay.reconnected()

    def feed(self, event: object) -> list[ToolCall]:
        """Apply one event; return the calls it released, in completion order."""
        if self._closed:
            raise AccumulatorClosedError("feed() after close()")
        index = self._events
        self._events = index + 1
        if self._fast:
            return self._feed_known(event, index)
        return self._feed_any(event, index)

    def _feed_any(self, event: object, index: int) -> list[ToolCall]:
        """The reference: any adapter's decode, the replay guard, translate, apply."""
        return self._feed_wire(self._adapter.decode(event, index), index)

    def _fragment(self, call_id: str, delta: str) -> list[ToolCall]:
        """Apply one argument fragment the adapter recorded (``hot_delta``): appended
        to its open call, the limits counted; O(1) plus the fragment's length."""
        call = self._calls.get(call_id)
        if call is None or call.phase is not _Phase.OPEN:
            released: list[ToolCall] = []
            self._delta(ev.ToolCallArgumentsDelta(call_id, delta), released)
            self._progress += 1
            return released
        nbytes = len(delta) if delta.isascii() else len(delta.encode("utf-8", "surrogatepass"))
        size = call.size + nbytes
        total = self._argument_bytes + nbytes
        if size > self._max_call_bytes or total > self._max_total_bytes:
            self._grow(call, nbytes)  # raises the limit that was hit
        call.size = size
        self._argument_bytes = total
        call.parts.append(delta)
        self._progress += 1
        return []

    def _feed_wire(self, wire: WireEvent, index: int) -> list[ToolCall]:
        """The long way for one event already decoded by the adapter."""
        key = self._adapter.replay_key(wire)
        if self._replay.is_replay(key, wire.sse_id, wire.content, index):
            self._replayed += 1
            return []
        if self._terminal is not None:
            self._after_terminal += 1
            return []
        return self._translate(wire, index)

    def _translate(self, wire: WireEvent, index: int) -> list[ToolCall]:
        released: list[ToolCall] = []
        normalized = self._adapter.translate(wire, index)
        # A known event with nothing for the accumulator (response.created, a usage
        # chunk) is still the server producing output; only heartbeats and unknown
        # types are not progress.
        progressed = not normalized
        for item in normalized:
            progressed |= self._apply(item, released)
        if progressed:
            self._progress += 1
        return released

    def close(self) -> list[ToolCall]:
        """The transport ended. Without a terminal event the response is ``truncated``."""
        if self._closed:
            return []
        self._closed = True
        released: list[ToolCall] = []
        if self._terminal is None:
            self._end(Terminal(TerminalKind.TRUNCATED), released)
            if self._progress == 0 and self._unknown > 0:
                raise self._unrecognized()
        return released

    def _unrecognized(self) -> UnrecognizedStream:
        return UnrecognizedStream(self._adapter.name, self._unknown, self._unknown_types)

    # -- event application ---------------------------------------------------

    def _apply(self, event: ev.StreamEvent, released: list[ToolCall]) -> bool:
        """Apply one normalized event; return whether it was progress."""
        match event:
            case ev.Heartbeat():
                self._heartbeats += 1
                return False
            case ev.UnknownEvent(type=etype):
                self._unknown += 1
                name = safe_name(etype)
                if name in self._unknown_types or len(self._unknown_types) < _MAX_UNKNOWN_TYPES:
                    self._unknown_types[name] += 1
                if self._progress == 0 and self._unknown >= UNRECOGNIZED_LIMIT:
                    raise self._unrecognized()
                return False
            case ev.TextDelta(text=text, part=part, field=name):
                self._text_chars += len(text)
                if part is not None:
                    self._turn.grow(part, name, text)
                if self._on_text is not None and text:
                    self._on_text(text)
            case ev.ToolCallStarted():
                self._started(event, released)
            case ev.ToolCallArgumentsDelta():
                self._delta(event, released)
            case ev.ToolCallArgumentsSnapshot():
                self._snapshot(event, released)
            case ev.ToolCallArgumentsDone():
                self._done(event, released)
            case ev.ToolCallCut(call_id=call_id, reason=reason):
                call = self._calls.get(call_id)
                if call is not None and call.phase is _Phase.OPEN:
                    self._settle(call, CallStatus.INCOMPLETE, reason, released)
            case ev.ProviderToolCall():
                self._provider_call(event, released)
            case ev.StreamAnomaly(reason=reason, call_ids=call_ids):
                if not call_ids:
                    self._note(reason, None)
                for call_id in call_ids:
                    self._reject(call_id, reason, released)
            case ev.TurnPart(position=position, part=part, call_id=call_id):
                self._turn.part(position, part, call_id)
            case ev.TurnDelta(position=position, field=name, text=text):
                self._turn.grow(position, name, text)
            case ev.TurnAppend(position=position, field=name, value=value):
                self._turn.append(position, name, value)
            case ev.ResponseCompleted():
                self._end(Terminal(TerminalKind.COMPLETED), released)
            case ev.ResponseIncomplete(reason=reason):
                self._end(Terminal(TerminalKind.INCOMPLETE, reason), released)
            case ev.ResponseFailed(error=error):
                self._end(Terminal(TerminalKind.FAILED, error), released)
            case ev.StreamTruncated():
                self._end(Terminal(TerminalKind.TRUNCATED), released)
        return True

    def _started(self, event: ev.ToolCallStarted, released: list[ToolCall]) -> None:
        call = self._calls.get(event.call_id)
        if call is not None:
            if (call.name, call.kind) != (event.name, event.kind):
                self._reject(event.call_id, "conflicting_start", released)
            return  # the same start again: a replay, nothing changes
        self._register(_Call(event.call_id, event.name, event.index, event.kind))
        self._turn.call_started(event.call_id, event.index)

    def _register(self, call: _Call) -> None:
        if len(self._calls) >= self._max_calls:
            raise AccumulatorLimitExceeded("max_calls", self._max_calls, self._index)
        self._calls[call.call_id] = call

    def _delta(self, event: ev.ToolCallArgumentsDelta, released: list[ToolCall]) -> None:
        call = self._known(event.call_id, "delta_for_unknown_call")
        if call is None:
            return
        if call.phase is not _Phase.OPEN:
            if self._is_complete(call):
                self._reject(call.call_id, "delta_after_completion", released)
            return  # a call already cut or rejected: nothing more to decide
        self._grow(call, len(event.delta.encode("utf-8", "surrogatepass")))
        call.parts.append(event.delta)

    def _grow(self, call: _Call, nbytes: int) -> None:
        if call.size + nbytes > self._max_call_bytes:
            raise AccumulatorLimitExceeded(
                "max_call_argument_bytes", self._max_call_bytes, self._index
            )
        if self._argument_bytes + nbytes > self._max_total_bytes:
            raise AccumulatorLimitExceeded(
                "max_total_argument_bytes", self._max_total_bytes, self._index
            )
        call.size += nbytes
        self._argument_bytes += nbytes

    def _snapshot(self, event: ev.ToolCallArgumentsSnapshot, released: list[ToolCall]) -> None:
        call = self._known(event.call_id, "snapshot_for_unknown_call")
        if call is None:
            return
        if call.phase is _Phase.OPEN:
            disagrees = (call.parts and "".join(call.parts) != event.arguments) or (
                call.snapshot is not None and call.snapshot != event.arguments
            )
            if disagrees:
                self._reject(call.call_id, "arguments_mismatch", released)
            else:
                call.snapshot = event.arguments
            return
        outcome = call.outcome
        if (
            self._is_complete(call)
            and outcome is not None
            and outcome.raw_arguments != event.arguments
        ):
            self._reject(call.call_id, "arguments_mismatch", released)

    def _done(self, event: ev.ToolCallArgumentsDone, released: list[ToolCall]) -> None:
        call = self._known(event.call_id, "completion_for_unknown_call")
        if call is None:
            return
        if call.phase is not _Phase.OPEN:
            outcome = call.outcome
            same = (
                outcome is not None
                and outcome.status is CallStatus.COMPLETE
                and (event.arguments is None or event.arguments == outcome.raw_arguments)
            )
            if not same and self._is_complete(call):
                self._reject(call.call_id, "conflicting_completion", released)
            return  # the same completion again (a replay), or a call already closed
        accumulated = "".join(call.parts)
        if event.arguments is None:
            text = accumulated
        else:
            if call.parts and event.arguments != accumulated:
                self._reject(call.call_id, "arguments_mismatch", released)
                return
            if not call.parts:
                self._grow(call, len(event.arguments.encode("utf-8", "surrogatepass")))
            text = event.arguments
        if call.snapshot is not None and call.snapshot != text:
            self._reject(call.call_id, "arguments_mismatch", released)
            return
        call.parts = [text]
        if call.kind not in JSON_CALL_KINDS:
            self._settle(call, CallStatus.COMPLETE, None, released, raw=text)
            return
        try:
            arguments = parse_arguments(text, self._max_depth)
        except StrictParseError as rejected:
            self._settle(call, CallStatus.REJECTED, rejected.reason, released, raw=text)
            return
        self._settle(call, CallStatus.COMPLETE, None, released, raw=text, arguments=arguments)

    def _provider_call(self, event: ev.ProviderToolCall, released: list[ToolCall]) -> None:
        call = self._calls.get(event.call_id)
        if call is not None:
            if call.kind != event.kind:
                self._note("conflicting_start", event.call_id)
            return
        call = _Call(event.call_id, event.name, event.index, event.kind)
        self._register(call)
        self._settle(call, CallStatus.PROVIDER_EXECUTED, event.kind, released)

    # -- decisions -----------------------------------------------------------

    @staticmethod
    def _is_complete(call: _Call) -> bool:
        return call.outcome is not None and call.outcome.status is CallStatus.COMPLETE

    def _note(self, reason: str, call_id: str | None, *, after_release: bool = False) -> None:
        self._anomalies.append(Anomaly(self._index, reason, call_id, after_release))

    def _known(self, call_id: str, unknown: str) -> _Call | None:
        """The call ``call_id``, or None with the anomaly ``unknown`` noted: an event
        for a call never started is reported, never acted on."""
        call = self._calls.get(call_id)
        if call is None:
            self._note(unknown, call_id)
        return call

    def _reject(self, call_id: str, reason: str, released: list[ToolCall]) -> None:
        """Reject a call that can no longer be trusted, if it was not handed over yet."""
        call = self._known(call_id, reason)
        if call is None:
            return
        if call.phase is _Phase.RELEASED:
            self._note(reason, call_id, after_release=True)
            return
        self._note(reason, call_id)
        if call.phase is _Phase.SETTLED:
            assert call.outcome is not None
            if call.outcome.status is not CallStatus.COMPLETE:
                return  # already not runnable; the first reason stands
            self._settle_order.remove(call)
            call.phase = _Phase.OPEN
        self._settle(call, CallStatus.REJECTED, reason, released)

    def _settle(
        self,
        call: _Call,
        status: CallStatus,
        reason: str | None,
        released: list[ToolCall],
        *,
        raw: str | None = None,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        if raw is None and call.parts:
            raw = "".join(call.parts)
        call.outcome = ToolCall(
            call_id=call.call_id,
            name=call.name,
            status=status,
            arguments=arguments,
            raw_arguments=raw,
            reason=reason,
            kind=call.kind,
            index=call.index,
            provider=self._adapter.name,
        )
        call.phase = _Phase.SETTLED
        self._settle_order.append(call)
        if status is not CallStatus.COMPLETE:
            self._release(call, released)  # never runnable: report it at once
        elif self._dispatch(call.name) is DispatchMode.ON_CALL_COMPLETE:
            self._release(call, released)

    def _release(self, call: _Call, released: list[ToolCall]) -> None:
        assert call.outcome is not None and call.phase is _Phase.SETTLED
        call.phase = _Phase.RELEASED
        self._released += 1
        released.append(call.outcome)

    def _end(self, terminal: Terminal, released: list[ToolCall]) -> None:
        """Record the terminal (the first one wins) and release everything still held."""
        if self._terminal is not None:
            if terminal != self._terminal:
                self._note("second_terminal", None)
            return
        self._terminal = terminal
        if terminal.succeeded:
            open_reason = "no_completion_signal"
        elif terminal.kind is TerminalKind.INCOMPLETE and terminal.reason:
            open_reason = terminal.reason
        else:
            open_reason = terminal.kind.value
        for call in list(self._settle_order):
            if call.phase is _Phase.SETTLED:
                self._release(call, released)
        for call in list(self._calls.values()):
            if call.phase is _Phase.OPEN:
                self._settle(call, CallStatus.INCOMPLETE, open_reason, released)
            if call.phase is _Phase.SETTLED:
                self._release(call, released)


def stream_calls(
    chunks: Iterable[bytes], acc: Accumulator, decoder: SSEDecoder | None = None
) -> Iterator[ToolCall]:
    """Decode raw ``text/event-stream`` bytes and yield each call as ``acc`` releases it.

    The caller owns the I/O (a file, a socket, a recorded transcript); this only
    connects the two state machines: bytes -> events (SSE) -> calls. When the
    chunks run out the transport ended, so the accumulator is closed and
    ``acc.terminal`` is set. Events the decoder completed before a limit error
    are still applied, then the error propagates.
    """
    decoder = decoder if decoder is not None else SSEDecoder()
    for chunk in chunks:
        try:
            events = decoder.feed(chunk)
        except SSELimitExceeded as exc:
            for event in exc.events:
                yield from acc.feed(event)
            raise
        for event in events:
            yield from acc.feed(event)
    decoder.end()
    yield from acc.close()
