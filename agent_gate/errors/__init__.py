"""Every error agent-gate raises on purpose, one module per room, and how messages name things.

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
    │   └── UnknownRouteRole        a serve route's roles: no rule of the policy names [serve]
    ├── AmbiguousCall               a call id in several tasks; name the task
    ├── ApprovalRefused             this approver, or the policy, may not approve it
    ├── NotInDoubt                  resolve() of a call that is not in doubt
    ├── OperatorRefused             outside an operator's rights; a name taken [serve]
    ├── UpstreamUnavailable         the MCP proxy's upstream is down: retry  [integrations.mcp]
    ├── CallInDoubt                 an engine's step found its call in doubt [integrations]
    └── OutcomeUnknown              raised BY a tool: it cannot tell if it wrote

``tests/test_public_api.py`` holds this drawing to the classes defined here. Each
room's errors sit in a module of their own (``streams``, ``tools``, ``policy``,
``ledger``, ``gate``; ``base`` under them all) and are imported from here, the one
public path: a class's ``__module__`` is set to ``agent_gate.errors``, so a pickled
error (DBOS stores a step's error that way) and a traceback name the path that stays
when a room's module is split or renamed.

The helpers here are the one place that decides how a message may name something
that came from outside: ``safe_name`` for a name read off the wire (an event type,
a field), ``error_code`` for an exception raised by code we do not control (its
type, never its text, which may quote the input), ``json_type_name`` for a value
that must be described without being shown (the arguments of a call, a redacted
field). Every layer that writes such a message uses them, so what may leak is
decided once.
"""

from __future__ import annotations

from agent_gate.errors.base import (
    AgentGateError,
    error_code,
    json_type_name,
    restore_error,
    safe_name,
)
from agent_gate.errors.gate import (
    AmbiguousCall,
    ApprovalRefused,
    CallInDoubt,
    GateUsageError,
    NotInDoubt,
    OperatorRefused,
    OutcomeUnknown,
    UnknownRouteRole,
    UpstreamUnavailable,
)
from agent_gate.errors.ledger import (
    AnswerMismatch,
    AuditCheckpointRefused,
    EvidenceError,
    IllegalTransition,
    LedgerConfigError,
    LedgerMissing,
    LedgerReplaced,
    LedgerSchemaError,
    NotAwaitingApproval,
    SealError,
    SealKeyMissing,
    SealKeyUnsafe,
    TaskContextConflict,
    UnmatchedAnswer,
)
from agent_gate.errors.policy import (
    AddressError,
    PathEscapes,
    PolicyError,
    PolicyLoadError,
    Problem,
    UnjudgeablePath,
)
from agent_gate.errors.streams import (
    AccumulatorClosedError,
    AccumulatorError,
    AccumulatorLimitExceeded,
    ArgumentsTooDeep,
    MalformedEventError,
    ProtocolNotDetected,
    ProviderError,
    ReplayConflictError,
    ReplayLimitExceeded,
    SSEError,
    SSELimitExceeded,
    SSEStateError,
    StreamConnectError,
    StreamContentTypeError,
    StreamError,
    StreamHTTPStatusError,
    StreamIdleTimeout,
    StreamLimitExceeded,
    StreamProgressTimeout,
    StreamTimeout,
    StreamTruncatedError,
    StrictParseError,
    TruncationReason,
    UnknownProviderError,
    UnrecognizedStream,
)
from agent_gate.errors.tools import (
    COERCION_UNSTABLE,
    ArgumentError,
    ArgumentsInvalid,
    ArgumentsNotObject,
    ToolDefinitionError,
    UnknownTool,
)

__all__ = [
    "COERCION_UNSTABLE",
    "AccumulatorClosedError",
    "AccumulatorError",
    "AccumulatorLimitExceeded",
    "AddressError",
    "AgentGateError",
    "AmbiguousCall",
    "AnswerMismatch",
    "ApprovalRefused",
    "ArgumentError",
    "ArgumentsInvalid",
    "ArgumentsNotObject",
    "ArgumentsTooDeep",
    "AuditCheckpointRefused",
    "CallInDoubt",
    "EvidenceError",
    "GateUsageError",
    "IllegalTransition",
    "LedgerConfigError",
    "LedgerMissing",
    "LedgerReplaced",
    "LedgerSchemaError",
    "MalformedEventError",
    "NotAwaitingApproval",
    "NotInDoubt",
    "OperatorRefused",
    "OutcomeUnknown",
    "PathEscapes",
    "PolicyError",
    "PolicyLoadError",
    "Problem",
    "ProtocolNotDetected",
    "ProviderError",
    "ReplayConflictError",
    "ReplayLimitExceeded",
    "SSEError",
    "SSELimitExceeded",
    "SSEStateError",
    "SealError",
    "SealKeyMissing",
    "SealKeyUnsafe",
    "StreamConnectError",
    "StreamContentTypeError",
    "StreamError",
    "StreamHTTPStatusError",
    "StreamIdleTimeout",
    "StreamLimitExceeded",
    "StreamProgressTimeout",
    "StreamTimeout",
    "StreamTruncatedError",
    "StrictParseError",
    "TaskContextConflict",
    "ToolDefinitionError",
    "TruncationReason",
    "UnjudgeablePath",
    "UnknownProviderError",
    "UnknownRouteRole",
    "UnknownTool",
    "UnmatchedAnswer",
    "UnrecognizedStream",
    "UpstreamUnavailable",
    "error_code",
    "json_type_name",
    "restore_error",
    "safe_name",
]

for _name in __all__:
    _value = globals()[_name]
    if isinstance(_value, type):
        _value.__module__ = __name__
del _name, _value
restore_error.__module__ = __name__  # what a pickled error names, wherever it lives
