"""Every error agent-gate raises on purpose, in one module, and how messages name things.

Callers catch ``AgentGateError`` to handle anything the gate refuses, without
catching unrelated bugs; each layer's family has its own base. Messages carry
counts, byte offsets, event indexes and ids, never payload text: errors end up in
logs, and logs are not where arguments go. Each layer's package re-exports its own
errors (``agent_gate.sse.SSEError``...), so callers import them from where they work.

The tree, by layer from the bottom (what raises it, in brackets)::

    AgentGateError
    ├── ArgumentsTooDeep            a value nests deeper than the limit   [plainjson]
    ├── StrictParseError            argument text fails strict parsing    [strict_json]
    ├── SSEError                                                          [sse]
    │   ├── SSEStateError           the decoder used after end() or a limit error
    │   └── SSELimitExceeded        a line, event or stream limit, at a byte offset
    ├── StreamError                                                       [transport]
    │   ├── StreamConnectError      the request could not be sent
    │   ├── StreamHTTPStatusError   a non-2xx status (bounded, redacted excerpt)
    │   ├── StreamContentTypeError  not text/event-stream
    │   ├── StreamLimitExceeded     a transport limit (body, reconnects)
    │   ├── StreamTimeout
    │   │   ├── StreamIdleTimeout       no bytes for too long
    │   │   └── StreamProgressTimeout   bytes, but no progress (heartbeats only)
    │   └── StreamTruncatedError    ended without its terminal event, not resumable
    ├── ProviderError                                                     [providers]
    │   ├── UnknownProviderError    no adapter by that name
    │   ├── MalformedEventError     an event's JSON or shape is wrong, at an index
    │   ├── ReplayConflictError     a replayed position carries other content
    │   └── ReplayLimitExceeded     the replay guard's bound
    ├── AccumulatorError                                                  [accumulate]
    │   ├── AccumulatorClosedError  feed() after close()
    │   ├── AccumulatorLimitExceeded  a bound on calls, arguments or events
    │   ├── UnrecognizedStream      the chosen adapter knows none of the events
    │   └── ProtocolNotDetected     provider="auto" could not tell  [autodetect]
    ├── ToolDefinitionError         a tool registered wrongly               [tools]
    ├── UnknownTool                 no such tool in the registry
    ├── ArgumentsNotObject          arguments are JSON but not an object
    ├── ArgumentsInvalid            arguments fail the schema (pointers, keywords)
    ├── PolicyError                                                       [policy]
    │   ├── PolicyLoadError         every problem of a policy file, located
    │   ├── UnjudgeablePath         a path argument cannot be resolved
    │   ├── AddressError            not a host, address, URL or e-mail address
    │   └── PathEscapes             open_beneath refused a path
    ├── IllegalTransition           an arrow the state table lacks: a bug   [ledger]
    ├── TaskContextConflict         a task bound to another principal or scope
    ├── NotAwaitingApproval         approve/deny of a call that does not wait
    │   └── UnmatchedAnswer         a framework's answer names no waiting call [integrations]
    ├── AnswerMismatch              an answer to arguments other than the call's
    ├── LedgerConfigError           a ledger URL or backend that cannot be used
    │   └── LedgerMissing           no ledger there, and create= was not given
    ├── LedgerReplaced              the file under an open ledger was swapped
    ├── LedgerSchemaError           the schema is not this version's
    ├── AuditCheckpointRefused      a checkpoint would bind a trail that lost heads
    ├── EvidenceError               a key, note, proof or bundle that cannot be read [evidence]
    ├── SealError                   sealed arguments cannot be opened
    ├── SealKeyMissing              no seal key where one is needed
    │   └── SealKeyUnsafe           a key file others can read
    ├── GateUsageError              the gate called in a way it cannot honour [gate]
    ├── AmbiguousCall               a call id in several tasks; name the task
    ├── ApprovalRefused             this approver, or the policy, may not approve it
    ├── NotInDoubt                  resolve() of a call that is not in doubt
    ├── OperatorRefused             outside an operator's rights; a name taken [serve]
    ├── UpstreamUnavailable         the MCP proxy's upstream is down: retry  [integrations.mcp]
    └── OutcomeUnknown              raised BY a tool: it cannot tell if it wrote

``tests/test_public_api.py`` holds this drawing to the classes defined here.

The helpers here are the one place that decides how a message may name something
that came from outside: ``safe_name`` for a name read off the wire (an event type,
a field), ``error_code`` for an exception raised by code we do not control (its
type, never its text, which may quote the input), ``json_type_name`` for a value
that must be described without being shown (the arguments of a call, a redacted
field). Every layer that writes such a message uses them, so what may leak is
decided once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

__all__ = ["AgentGateError", "error_code", "json_type_name", "safe_name"]


class AgentGateError(Exception):
    """Base class of every error agent-gate raises on purpose."""


_SAFE_NAME = re.compile(r"[A-Za-z0-9_.\-\[\]]{1,64}")


def safe_name(value: object) -> str:
    """An event type or field name fit for an error message, or a placeholder.

    Event type names come from the wire; a hostile or broken server could put
    payload text there, so anything that does not look like an identifier is
    replaced rather than echoed.
    """
    if isinstance(value, str) and _SAFE_NAME.fullmatch(value):
        return value
    return "<unprintable>"


def error_code(exc: BaseException) -> str:
    """An exception as a machine code for a message: its type's name, never its text."""
    return safe_name(type(exc).__name__)


def json_type_name(value: object) -> str:
    """The JSON type a Python value stands for, for messages that must not show it.

    A value that is no JSON type at all is named by its Python type, which says
    nothing of its content either.
    """
    if value is None:
        return "null"
    kinds = ((bool, "boolean"), (int | float, "number"), (str, "string"),
             (list | tuple, "array"), (dict, "object"))
    return next((name for kind, name in kinds if isinstance(value, kind)),
                type(value).__name__)


# ------------------------------------------------------------ plain JSON


class ArgumentsTooDeep(AgentGateError, ValueError):
    """Arguments nest deeper than the configured limit. The message names the limit,
    never the value; ``reason`` is the identifier a rejected call records."""

    reason = "arguments_too_deep"

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"arguments nest deeper than {limit} levels")


# ----------------------------------------------------------- strict JSON


class StrictParseError(AgentGateError):
    """Argument text failed strict parsing; ``reason`` is an identifier
    (``invalid_json``, ``duplicate_key``, ``concatenated_json``,
    ``arguments_not_object``, ``invalid_unicode``, ``arguments_too_deep``), never
    the text."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


# ------------------------------------------------------------------- sse
# Each names the limit, the byte offset and the event index; never a byte of the payload.


class SSEError(AgentGateError):
    """Base of the SSE decoder's errors."""


class SSEStateError(SSEError):
    """The decoder was used after ``end()`` or after it raised a limit error."""


class SSELimitExceeded(SSEError):
    """A configured limit was exceeded; the decoder is unusable afterwards.

    ``events`` holds the events that were completed by the same ``feed()`` call
    before the violation, so nothing the stream did deliver is lost.
    """

    def __init__(
        self, limit: str, limit_bytes: int, offset: int, event_index: int,
        events: list[Any] | None = None,
    ) -> None:
        self.limit = limit
        self.limit_bytes = limit_bytes
        self.offset = offset
        self.event_index = event_index
        self.events: list[Any] = list(events or ())  # the ServerSentEvents
        super().__init__(
            f"SSE limit {limit}={limit_bytes} bytes exceeded at byte offset {offset} "
            f"(event index {event_index})"
        )


# ------------------------------------------------------------- transport
# Counts, offsets and reasons, never the stream's payload; the one response excerpt
# quoted anywhere (StreamHTTPStatusError.excerpt) is bounded and redacted.


class TruncationReason(Enum):
    """Why a stream that ended without its terminal event could not be resumed."""

    NO_EVENT_ID = "no_event_id"
    """The server gave no event id before the cut: there is no position to resume from."""
    NOT_RESUMABLE = "not_resumable"
    """The request was not a GET and the caller did not mark it resumable: re-sending
    it would ask for a new answer, not for the rest of this one."""
    NO_RESUME_POINT = "no_resume_point"
    """A resume strategy had not seen what it needs (e.g. a response id) to resume."""
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    """Reconnects kept failing or kept delivering nothing new; the bound was reached."""
    SERVER_ENDED = "server_ended"
    """The server answered 204 No Content: WHATWG's "stop reconnecting"."""


class StreamError(AgentGateError):
    """Base of every error the transport raises on purpose."""

    def _at(self, offset: int, event_index: int, connection: int) -> str:
        """Keep where the stream stopped and say it as every transport error does.

        ``offset`` is the byte offset in the response of connection ``connection``;
        ``event_index`` counts events across the whole stream, reconnects included.
        """
        self.offset = offset
        self.event_index = event_index
        self.connection = connection
        return f"at byte offset {offset} of connection {connection} (event index {event_index})"


class StreamConnectError(StreamError):
    """The request could not be sent or its response headers never arrived.

    Carries the httpx exception class name only: its message may quote a URL
    with credentials in the query string.
    """

    def __init__(self, cause: str, connection: int) -> None:
        self.cause = cause
        self.connection = connection
        super().__init__(f"stream connection {connection} failed: {cause}")


class StreamHTTPStatusError(StreamError):
    """A non-2xx status: the server refused, before any event was decoded."""

    def __init__(
        self,
        status: int,
        *,
        excerpt: str,
        error_type: str | None,
        retryable: bool,
        retry_after: float | None,
        connection: int,
    ) -> None:
        self.status = status
        self.excerpt = excerpt
        """Bounded and redacted summary of a JSON error body; never the whole body."""
        self.error_type = error_type
        """The provider's error type or code (``rate_limit_error``, ``overloaded_error``...)."""
        self.retryable = retryable
        """What a retry layer should conclude (429, 408, 409, 5xx, ``x-should-retry``).
        The transport itself never re-sends a request that was refused."""
        self.retry_after = retry_after
        self.connection = connection
        kind = f" {error_type}" if error_type else ""
        super().__init__(
            f"stream request got HTTP {status}{kind} (connection {connection}): {excerpt}"
        )


class StreamContentTypeError(StreamError):
    """A 2xx response that is not ``text/event-stream``: its body is never parsed as SSE."""

    def __init__(self, status: int, media_type: str, connection: int) -> None:
        self.status = status
        self.media_type = media_type
        self.connection = connection
        shown = media_type or "(none)"
        super().__init__(
            f"stream response HTTP {status} has Content-Type {shown}, not text/event-stream "
            f"(connection {connection}); the body was not read"
        )


class StreamLimitExceeded(StreamError):
    """A byte limit of the decoder tripped (line, event data, or one response)."""

    def __init__(
        self, limit: str, limit_bytes: int, offset: int, event_index: int, connection: int
    ) -> None:
        self.limit = limit
        self.limit_bytes = limit_bytes
        where = self._at(offset, event_index, connection)
        super().__init__(f"stream limit {limit}={limit_bytes} bytes exceeded {where}")


class StreamTimeout(StreamError):
    """Base of the two time limits."""

    limit: str

    def __init__(
        self, limit_seconds: float, waited: float, offset: int, event_index: int, connection: int
    ) -> None:
        self.limit_seconds = limit_seconds
        self.waited = waited
        where = self._at(offset, event_index, connection)
        super().__init__(
            f"stream limit {self.limit}={limit_seconds:g}s exceeded after {waited:.3f}s {where}"
        )


class StreamIdleTimeout(StreamTimeout):
    """No byte at all arrived for ``limit_seconds``: the connection is silent."""

    limit = "idle_timeout"


class StreamProgressTimeout(StreamTimeout):
    """No event other than a heartbeat arrived for ``limit_seconds``.

    Bytes may have kept flowing (comments, ``ping`` events): a server or proxy
    that only keeps the connection alive is not producing an answer.
    """

    limit = "progress_timeout"


class StreamTruncatedError(StreamError):
    """The stream ended before the caller's terminal event and could not be resumed.

    Nothing received after the last complete event may be treated as delivered,
    and a closed connection says nothing about whether the response finished.
    """

    def __init__(
        self,
        reason: TruncationReason,
        *,
        events: int,
        connections: int,
        last_event_id: str,
        discarded_partial_event: bool,
    ) -> None:
        self.reason = reason
        self.events = events
        self.connections = connections
        self.last_event_id = last_event_id
        self.discarded_partial_event = discarded_partial_event
        partial = ", a partial event was discarded" if discarded_partial_event else ""
        super().__init__(
            f"stream truncated ({reason.value}) after {events} events over "
            f"{connections} connection(s){partial}"
        )


# ------------------------------------------------------------- providers
# The event index, the provider and the field that was wrong; never the event's data.


class ProviderError(AgentGateError):
    """Base of the errors raised while translating a provider's events."""


class UnknownProviderError(ProviderError):
    """No adapter is registered under the requested name."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"unknown provider {safe_name(name)!r}; known: {', '.join(known)}")


class MalformedEventError(ProviderError):
    """An event could not be parsed or does not have the shape its type requires."""

    def __init__(self, provider: str, event_index: int, problem: str) -> None:
        self.provider = provider
        self.event_index = event_index
        self.problem = problem
        super().__init__(f"{provider}: malformed event at index {event_index}: {problem}")


class ReplayConflictError(ProviderError):
    """A replayed event (same sequence number or event id) carries different content.

    A stream that resumes with different bytes under the same position is not a
    replay but a different response; continuing would mix two answers.
    """

    def __init__(self, event_index: int, key: str) -> None:
        self.event_index = event_index
        self.key = key
        super().__init__(
            f"event at index {event_index} repeats position {key} with different content"
        )


class ReplayLimitExceeded(ProviderError):
    """The replay guard would remember more positions than its bound allows.

    Forgetting one instead would let a replayed event (an argument fragment) be
    applied twice, so the stream is abandoned, as for the accumulator's own limits.
    """

    def __init__(self, limit: str, limit_value: int, event_index: int) -> None:
        self.limit = limit
        self.limit_value = limit_value
        self.event_index = event_index
        super().__init__(f"limit {limit}={limit_value} exceeded at event index {event_index}")


# ----------------------------------------------------------- accumulator


class AccumulatorError(AgentGateError):
    """Base of the accumulator's own errors."""


class AccumulatorClosedError(AccumulatorError):
    """``feed`` was called after ``close``."""


class UnrecognizedStream(AccumulatorError):
    """The chosen adapter recognised none of the stream's events: the wrong
    protocol was chosen (or the server speaks another one). Raised after
    ``UNRECOGNIZED_LIMIT`` such events, or at ``close()`` for a shorter stream,
    instead of ending the response quietly as ``truncated``."""

    def __init__(self, provider: str, unknown: int, types: Iterable[str]) -> None:
        self.provider = provider
        self.unknown = unknown
        listed = ", ".join(sorted(types)[:6]) or "none named"
        super().__init__(
            f"none of the {unknown} events is of the {provider} protocol (types seen: "
            f"{listed}); is the provider the right one?"
        )


class AccumulatorLimitExceeded(AccumulatorError):
    """A configured bound was exceeded; the stream must be abandoned."""

    def __init__(self, limit: str, limit_value: int, event_index: int) -> None:
        self.limit = limit
        self.limit_value = limit_value
        self.event_index = event_index
        super().__init__(f"limit {limit}={limit_value} exceeded at event index {event_index}")


class ProtocolNotDetected(AccumulatorError):
    """``provider="auto"`` could not tell the protocol from the stream's first events."""

    def __init__(self, seen: int) -> None:
        self.seen = seen
        super().__init__(
            f"could not tell the protocol from the first {seen} events (none is an OpenAI "
            "Responses, Chat Completions, Anthropic or Gemini event); name the provider"
        )


# ----------------------------------------------------------------- tools
# Where arguments failed as RFC 6901 pointers plus the schema keyword, never a value:
# both validators and pydantic map their locations to ``tools.pointer.json_pointer``.


class ToolDefinitionError(AgentGateError):
    """A tool was registered with an invalid schema or options; raised at import time."""


class UnknownTool(AgentGateError):
    """A call named a tool the registry does not have."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no tool named {name!r} is registered")
        self.name = name


class ArgumentsNotObject(AgentGateError):
    """The arguments were valid JSON but not an object; tools take named arguments only."""

    def __init__(self, tool: str, json_type: str) -> None:
        super().__init__(f"arguments of {tool!r} are a JSON {json_type}, not an object")
        self.tool = tool
        self.json_type = json_type


@dataclass(frozen=True, slots=True, order=True)
class ArgumentError:
    """Where an argument failed and which schema keyword it failed; never its value."""

    pointer: str
    keyword: str

    def __str__(self) -> str:
        return f"{self.pointer or '/'} ({self.keyword})"


COERCION_UNSTABLE: Final = "coercion_unstable"
"""The keyword of an ``ArgumentError`` for a model whose coerced value does not
survive a second validation unchanged (see ``Tool.handed``)."""


class ArgumentsInvalid(AgentGateError):
    """The arguments do not satisfy the tool's schema."""

    MAX_LISTED = 10

    def __init__(self, tool: str, errors: Sequence[ArgumentError]) -> None:
        self.tool = tool
        self.errors = tuple(errors)
        listed = "; ".join(str(e) for e in self.errors[: self.MAX_LISTED])
        more = len(self.errors) - self.MAX_LISTED
        suffix = f"; and {more} more" if more > 0 else ""
        super().__init__(f"arguments of {tool!r} fail its schema at {listed}{suffix}")


# ---------------------------------------------------------------- policy
# A load error points at the place to fix (file, line, column, dotted key), all
# problems of a file at once; messages never show a call's argument values.


class PolicyError(AgentGateError):
    """Base of every error the policy layer raises on purpose."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a policy file, located for a human editor.

    ``line`` and ``column`` are 1-based, as editors count; they are ``None`` only
    when the problem concerns the file as a whole (unreadable, empty, too large).
    """

    source: str
    line: int | None
    column: int | None
    key: str
    message: str

    def __str__(self) -> str:
        where = self.source
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        key = f" {self.key}:" if self.key else ""
        return f"{where}:{key} {self.message}"


class PolicyLoadError(PolicyError):
    """A policy file could not be read, parsed or validated.

    ``problems`` lists every problem found; the first one is also exposed as
    ``source`` / ``line`` / ``key`` for callers that report a single location.
    """

    def __init__(self, problems: Sequence[Problem]) -> None:
        if not problems:
            raise ValueError("PolicyLoadError needs at least one problem")
        self.problems: tuple[Problem, ...] = tuple(problems)
        first = self.problems[0]
        self.source = first.source
        self.line = first.line
        self.column = first.column
        self.key = first.key
        super().__init__("\n".join(str(p) for p in self.problems))


class UnjudgeablePath(PolicyError):
    """A value cannot be resolved to one absolute path; the message says why, never the value."""


class AddressError(PolicyError):
    """A value could not be read as a host, address, URL or e-mail address."""


class PathEscapes(PolicyError):
    """A path would leave its root, or would pass through a symlink, ``..`` or ``/``.

    ``component`` is the 1-based position of the offending component among the
    path's non-empty, non-``.`` components, or ``None`` when the path as a whole
    is at fault (absolute, NUL byte) or the kernel did not say which.
    """

    def __init__(self, reason: str, component: int | None = None) -> None:
        self.reason = reason
        self.component = component
        where = f"component {component} " if component is not None else "path "
        super().__init__(where + reason)


# ---------------------------------------------------------------- ledger


class IllegalTransition(AgentGateError):
    """Code asked for an arrow the table does not have: a bug, never a race."""

    def __init__(self, state: Enum, event: Enum) -> None:  # CallState, Event
        super().__init__(f"no transition from {state.value!r} on {event.value!r}")
        self.state = state
        self.event = event


class TaskContextConflict(AgentGateError):
    """A task was given another principal or scope than the one it was started with.

    A task's principal and scope are fixed when first given: quotas, approvals and
    resumes of the task are all judged for them, so they cannot change half-way.
    """


class NotAwaitingApproval(AgentGateError):
    """An approval or denial was given for a call that does not wait for one."""


class UnmatchedAnswer(NotAwaitingApproval):
    """An answer given through an agent framework names no call, or one not waiting in
    that task (unknown, another task's, answered otherwise): refused whole."""


class AnswerMismatch(AgentGateError):
    """An answer (approve, deny, resolve) named the hash of arguments that are not the
    call's now: the person saw another call. Refused and audited (``answer_refused``)."""


class LedgerConfigError(AgentGateError):
    """The database URL cannot hold a ledger (unsupported backend, in-memory SQLite)."""


class LedgerMissing(LedgerConfigError):
    """No SQLite ledger file at the path, and creating one was not asked for (a missing
    ledger is not an empty one: every call it recorded would run again)."""


class LedgerReplaced(AgentGateError):
    """The SQLite file this ledger opened was deleted or replaced by another file:
    nothing more is committed through this ledger (its writes would go to a file
    nobody reads, or to a ledger that never saw its calls)."""


class LedgerSchemaError(AgentGateError):
    """The database's schema is not the one this code was written for."""


class AuditCheckpointRefused(AgentGateError):
    """A checkpoint would hide task heads lost since the last one: ``audit verify``."""


class EvidenceError(AgentGateError):
    """A key, signed note, proof or bundle that is malformed or unreadable (not a failed check)."""


class SealError(AgentGateError):
    """A sealed value cannot be opened (another key, or the ciphertext was altered)."""


class SealKeyMissing(AgentGateError):
    """Redacted fields must be sealed and no seal key is configured."""


class SealKeyUnsafe(SealKeyMissing):
    """A key file others could read or replace: refused, as ``ssh`` refuses such a key.

    Readable by others, the key opens every sealed argument in the database; writable
    by others or owned by someone else, it can be swapped for a key an attacker holds.
    A subclass of ``SealKeyMissing``: whoever handles a missing key handles this one.
    """


# ------------------------------------------------------------------ gate


class OutcomeUnknown(AgentGateError):
    """Raise from a tool when it cannot tell whether its write happened (a timeout after
    the request was sent): the call is ``in_doubt``, not ``failed``, never retried blindly."""


class UpstreamUnavailable(AgentGateError):
    """The MCP proxy's upstream is down now: nothing was sent or recorded; retry later."""


class GateUsageError(AgentGateError):
    """The gate was called in a way it cannot honour (e.g. an async tool in a running loop)."""


class OperatorRefused(AgentGateError):
    """An operator asked for what their rights do not cover (refused and audited by
    ``agent-gate serve``), or ``operator add`` was given a name taken or not valid."""


class NotInDoubt(AgentGateError):
    """``resolve`` was asked to settle a call that is not ``in_doubt``."""


class AmbiguousCall(AgentGateError):
    """A call id matched calls in several tasks; name the task."""


class ApprovalRefused(AgentGateError):
    """An approval cannot be given: the policy named for it denies the call."""
