"""Admission: a call as handed in, turned into the one value the gate judges and keeps.

Everything that happens before the first commit lives here: the call's shape
(``as_call``), identifiers the ledger can store (a stand-in otherwise, so one bad
id rejects one call, never its batch), the argument object (parsed as strictly as
the accumulator parses a stream, bounded in depth, encodable as the ledger stores
it, coerced by the tool's model), and the hashes and seal of what is stored.

``Arguments`` owns the seal key: it is the one place a stored call's real
arguments are read back (unsealed when the policy redacts fields of its tool) and
their hash recomputed, so the decision, the claim and the approval check all see
the value that was hashed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from agent_gate.authorize import PolicyAuthorizer, principal_json, scope_json
from agent_gate.calls import JSON_CALL_KINDS, CallStatus, ToolCall
from agent_gate.errors import ArgumentsTooDeep, GateUsageError, StrictParseError, json_type_name
from agent_gate.ledger.canonical import arguments_hash, raw_arguments_hash
from agent_gate.ledger.models import ID_LEN, TOOL_NAME_LEN
from agent_gate.ledger.reasons import ReasonCode as R
from agent_gate.ledger.records import NewCall, Ruling
from agent_gate.ledger.states import Event
from agent_gate.plainjson import MAX_ARGUMENT_DEPTH, canonical_json, check_depth, sha256_hex
from agent_gate.privacy import seal as sealing
from agent_gate.strict_json import parse_arguments as strict_arguments
from agent_gate.tools import (
    COERCION_UNSTABLE,
    ArgumentsInvalid,
    Effect,
    Idempotency,
    Tool,
)

if TYPE_CHECKING:
    from agent_gate.ledger.records import CallRecord
    from agent_gate.policy import Principal, TaskScope

__all__ = ["Admitted", "Arguments", "CallContext", "admit", "as_call", "stable_key"]


@dataclass(frozen=True, slots=True)
class CallContext:
    """Principal and scope the application passed with a call (bound to its task)."""

    principal: str | None = None
    scope: str | None = None

    @classmethod
    def of(cls, principal: Principal | None, scope: TaskScope | None) -> CallContext:
        return cls(principal_json(principal), scope_json(scope))


@dataclass(frozen=True, slots=True)
class Admitted:
    """A call ready to be recorded: its row, and the ruling it already has (if any)."""

    call: ToolCall
    """The call with storable identifiers (stand-ins where the model's were not)."""
    asked_id: str
    """The id the agent answers the model with (the model's own, even when stood in)."""
    row: NewCall
    early: Ruling | None
    """A ruling taken before any policy: the call can never run (why, which arrow)."""


def stable_key(task_id: str, idem_key: str) -> str:
    """The idempotency key a tool hands downstream: stable across attempts and
    processes, opaque to the downstream service."""
    return "ag-" + sha256_hex(f"{task_id}\x00{idem_key}")[:40]


def seal_binding(task_id: str, call_id: str, args_hash: str) -> str:
    """What a sealed argument blob is bound to: it opens only in its own row."""
    return f"{task_id}\x00{call_id}\x00{args_hash}"


class Arguments:
    """The seal key, and a stored call's real arguments and hashes through it."""

    def __init__(
        self,
        source: sealing.SealKey | bytes | str | os.PathLike[str] | None,
        ledger_url: str,
        rules: PolicyAuthorizer | None,
    ) -> None:
        self._source = source
        self._url = ledger_url
        self.key = sealing.resolve(source, ledger_url)
        if (
            rules is not None
            and rules.redacts_anything
            and self.key is None
            and sealing.default_key_path(ledger_url) is None
        ):
            raise sealing.SealKeyMissing(
                "the policy redacts argument fields, which the ledger stores sealed: "
                f"give every worker the same key (${sealing.ENV_KEY} or "
                f"${sealing.ENV_KEY_FILE}, or seal_key=)"
            )

    def sealing_key(self) -> sealing.SealKey:
        """The key to seal with, created beside the ledger on first need."""
        if self.key is None:
            self.key = sealing.resolve(self._source, self._url, create=True)
        if self.key is None:  # pragma: no cover - __init__ refuses this configuration
            raise sealing.SealKeyMissing("redacted fields must be sealed and no key is configured")
        return self.key

    def of(self, rec: CallRecord) -> tuple[dict[str, Any] | None, str | None]:
        """The call's real arguments (unsealed when sealed), or why they are not at hand."""
        if rec.sealed_arguments is None:
            return rec.arguments, None
        if self.key is None:
            return None, (
                f"call {rec.call_id!r} has sealed arguments and this process has no seal key "
                f"(${sealing.ENV_KEY} or ${sealing.ENV_KEY_FILE})"
            )
        try:
            text = self.key.open(
                rec.sealed_arguments,
                bound_to=seal_binding(rec.task_id, rec.call_id, rec.args_hash),
            )
        except sealing.SealError as exc:
            return None, f"the sealed arguments of call {rec.call_id!r} cannot be opened: {exc}"
        value = json.loads(text)
        if not isinstance(value, dict) or self.key.keyed_hash(text) != rec.args_hash:
            return None, f"the sealed arguments of call {rec.call_id!r} do not match its hash"
        return value, None

    def hash_for(self, rec: CallRecord, arguments: Mapping[str, Any]) -> str:
        """The argument hash ``arguments`` would have in ``rec``'s row."""
        text = canonical_json(dict(arguments))
        if rec.sealed_arguments is not None and self.key is not None:
            return self.key.keyed_hash(text)
        return sha256_hex(text)

    def intact(self, rec: CallRecord) -> bool | None:
        """Do the stored arguments still hash to ``args_hash``? None: cannot tell here
        (sealed, and this process has no key)."""
        if rec.sealed_arguments is None:
            return rec.arguments is not None and arguments_hash(rec.arguments) == rec.args_hash
        if self.key is None:
            return None
        arguments, why = self.of(rec)
        return why is None and arguments is not None


def admit(
    task_id: str,
    call: ToolCall,
    *,
    tool: Tool | None,
    rules: PolicyAuthorizer | None,
    keys: Arguments,
    classes: Callable[[Tool], tuple[Effect, Idempotency]],
    context: CallContext,
    early: Ruling | None = None,
) -> Admitted:
    """The row to record for ``call`` and the ruling it already carries (``early``:
    one the caller already took, e.g. the response ended before a deferred write)."""
    asked_id = call.call_id
    call, unstorable = _storable_identifiers(call)
    arguments, reject, text = classify(call, tool)
    early = early or unstorable or reject
    key_for, stored = _redacted(call.name, arguments, rules, keys)
    idem_key = f"call:{call.call_id}"
    if tool is not None and arguments is not None and early is None:
        values = tool.dedupe_values(arguments)
        if values is not None:
            idem_key = f"dedupe:{call.name}:{_content_hash(values, key_for)}"
    args_hash, sealed = _hash_and_seal(task_id, call, arguments, text, key_for)
    if key_for is None and text is None and arguments is None and rules is not None \
            and rules.redacts_anything:
        # Rejected before any field could be redacted (an unknown tool, not an
        # object): its text may hold a secret that a plain SHA-256 would let
        # anyone with the ledger confirm by guessing. Keep a keyed digest of it.
        args_hash = keys.sealing_key().keyed_hash(args_hash)
    effect, idempotency = classes(tool) if tool is not None else (None, None)
    row = NewCall(
        task_id=task_id,
        call_id=call.call_id,
        idem_key=idem_key,
        tool=call.name,
        effect=effect.value if effect else "unknown",
        idempotency=idempotency.value if idempotency else "unknown",
        args_hash=args_hash,
        arguments=stored,
        arguments_json=text if stored is arguments else None,
        sealed_arguments=sealed,
        principal=context.principal,
        scope=context.scope,
    )
    return Admitted(call, asked_id, row, early)


def _reject(code: R, reason: str) -> Ruling:
    return Ruling(Event.REJECT, code, reason)


def _redacted(
    tool: str, arguments: dict[str, Any] | None, rules: PolicyAuthorizer | None,
    keys: Arguments,
) -> tuple[sealing.SealKey | None, dict[str, Any] | None]:
    """The key that seals and keys the hashes of ``tool``'s calls, and the form of
    ``arguments`` the row holds.

    For a tool the policy redacts fields of, the row holds the redacted form, the
    whole object is sealed, and every hash of argument content (argument hash,
    dedupe key) is keyed (see privacy.seal). This depends on the tool, not on
    whether this call carried a redacted field, so that two calls of one tool are
    always hashed alike and a dedupe key still catches a repeated write."""
    if arguments is None or rules is None or not rules.redacts(tool):
        return None, arguments
    key_for = keys.sealing_key()
    return key_for, rules.redact(tool, arguments, key=key_for.digest_key) or arguments


def _content_hash(value: Any, key_for: sealing.SealKey | None) -> str:
    text = canonical_json(value)
    return key_for.keyed_hash(text) if key_for is not None else sha256_hex(text)


def _hash_and_seal(
    task_id: str, call: ToolCall, arguments: dict[str, Any] | None, text: str | None,
    key_for: sealing.SealKey | None,
) -> tuple[str, str | None]:
    """The row's argument hash, and the sealed object when the tool's calls are sealed."""
    if key_for is not None:
        assert arguments is not None  # a key is only taken for an argument object
        args_hash = _content_hash(arguments, key_for)
        return args_hash, key_for.seal(
            canonical_json(arguments), bound_to=seal_binding(task_id, call.call_id, args_hash)
        )
    if text is not None:
        return sha256_hex(text), None  # arguments_hash(arguments), from the text at hand
    parsed = arguments if arguments is not None else call.arguments
    return _hash_of(parsed, call.raw_arguments), None


_REJECTED_STREAM: dict[str, R] = {
    "arguments_not_object": R.ARGUMENTS_NOT_OBJECT,
    ArgumentsTooDeep.reason: R.ARGUMENTS_TOO_DEEP,
}
"""Why the accumulator rejected a call -> the reason code it is recorded with
(anything else: ``stream_rejected``)."""

_Classified = tuple[dict[str, Any] | None, Ruling | None, str | None]


def classify(call: ToolCall, tool: Tool | None) -> _Classified:
    """The call's argument object (if any), why it can never run (if so), and the
    object's canonical JSON when this already wrote it (a tool without a model, whose
    object is stored as it came): the ledger's hash and stored text are made from it,
    not from two more encodings of the same object.

    Each stage either rules the call out or hands the next one more: what the stream
    delivered, then the argument object, then its stored text, then the value the
    tool's model makes of it."""
    ruling = _delivered(call, tool)
    if ruling is not None:
        return None, ruling, None
    arguments, ruling = _argument_object(call)
    if ruling is not None:
        return None, ruling, None
    text, ruling = _stored_text(arguments)
    if ruling is not None:
        return None, ruling, None
    assert tool is not None  # _delivered rules out a call of no tool
    return _judged(call, tool, arguments, text)


def _delivered(call: ToolCall, tool: Tool | None) -> Ruling | None:
    """Why what the stream delivered can never run: incomplete, rejected, no such tool."""
    why = call.reason or "unknown"
    if call.status is CallStatus.INCOMPLETE:
        return Ruling(Event.MARK_INCOMPLETE, R.ARGUMENTS_INCOMPLETE,
                      f"the arguments never completed ({why}); not run")
    if call.status is CallStatus.REJECTED:
        return _reject(_REJECTED_STREAM.get(why, R.STREAM_REJECTED),
                       f"the stream delivered this call unusably ({why}); not run")
    if tool is None:
        return _reject(R.UNKNOWN_TOOL, f"no tool named {call.name!r} is registered; not run")
    return None


def _argument_object(call: ToolCall) -> tuple[Mapping[str, Any], Ruling | None]:
    """The arguments as an object (parsed from text when handed in as text), or why not."""
    arguments: Any = call.arguments
    if arguments is None:
        if call.kind not in JSON_CALL_KINDS:
            return {}, _reject(
                R.ARGUMENTS_NOT_OBJECT,
                f"a {call.kind} call carries free text, and {call.name!r} "
                "takes a JSON object; not run",
            )
        raw = call.raw_arguments or ""
        try:
            # As strict as the accumulator: text handed in directly must not pass
            # with duplicate keys (which member would the tool see?), NaN or lone
            # surrogates that a stream would have been rejected for.
            arguments = strict_arguments(raw)
        except StrictParseError as exc:
            if exc.reason == ArgumentsTooDeep.reason:
                return {}, _reject(
                    R.ARGUMENTS_TOO_DEEP,
                    f"the arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels; not run",
                )
            if exc.reason != "arguments_not_object":
                why = "" if exc.reason == "invalid_json" else f" ({exc.reason})"
                return {}, _reject(
                    R.ARGUMENTS_NOT_OBJECT, f"the arguments are not valid JSON{why}; not run"
                )
            arguments = json.loads(raw)  # valid JSON, not an object: named below
    if not isinstance(arguments, Mapping):
        return {}, _reject(
            R.ARGUMENTS_NOT_OBJECT,
            f"the arguments are a JSON {json_type_name(arguments)}, not an object; not run",
        )
    return arguments, None


def _stored_text(arguments: Mapping[str, Any]) -> tuple[str, Ruling | None]:
    """The object's canonical JSON as the ledger will store it, or why it has none."""
    try:
        # Handed in as an object, never parsed: bounded here as text is at parsing.
        check_depth(arguments)
    except ArgumentsTooDeep as exc:
        return "", _reject(
            R.ARGUMENTS_TOO_DEEP, f"the arguments nest deeper than {exc.limit} levels; not run"
        )
    try:
        # Encoded as the ledger will store it: a lone surrogate passes json.dumps but
        # no database column takes it.
        text = canonical_json(arguments)
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "", _reject(
            R.ARGUMENTS_NOT_JSON,
            "the arguments hold a lone surrogate (not valid Unicode text); not run",
        )
    except (TypeError, ValueError):
        return "", _reject(
            R.ARGUMENTS_NOT_JSON,
            "the arguments are not JSON data (NaN, Infinity, non-string keys "
            "or other objects); not run",
        )
    return text, None


def _judged(call: ToolCall, tool: Tool, arguments: Mapping[str, Any], text: str) -> _Classified:
    """The value the policy judges, the ledger hashes and the tool receives."""
    if tool.spec.model is None:
        # A dict's copy writes the same text; another mapping's might not.
        return dict(arguments), None, text if type(arguments) is dict else None
    # A tool declared with a pydantic model receives the model's coerced value (``Path``
    # normalized, strings stripped, defaults filled in). The policy must judge, the
    # ledger hash and the tool receive one value, so the call is coerced here and
    # everything after this point sees that value.
    try:
        return tool.judged(arguments), None, None
    except ArgumentsInvalid as exc:
        if any(e.keyword == COERCION_UNSTABLE for e in exc.errors):
            return None, _reject(
                R.SCHEMA_INVALID,
                f"the model of {call.name!r} changes its own output when validated "
                "again, so no single value can be judged and handed over; not run",
            ), None
        # The decision rejects it, naming the failed fields.
        return dict(arguments), None, None
    except Exception:
        # A bug in the tool's own validators: the call is recorded as it came and the
        # decision raises the error after the row committed (nothing is lost).
        return dict(arguments), None, None


def _hash_of(parsed: Any, raw: str | None) -> str:
    """The argument hash the conflict check compares: of the parsed value when it is
    JSON, else of the raw text (or, for values handed in that are not JSON, their repr)."""
    if parsed is not None:
        try:
            return arguments_hash(parsed)
        except (TypeError, ValueError):
            return raw_arguments_hash(repr(parsed))
    return raw_arguments_hash(raw)


def as_call(call: ToolCall | Mapping[str, Any]) -> ToolCall:
    """Accept a ``ToolCall`` or a plain ``{"call_id", "name", "arguments"}`` mapping."""
    if isinstance(call, ToolCall):
        return call
    if not isinstance(call, Mapping):
        raise GateUsageError("a call is a ToolCall or a mapping with call_id, name, arguments")
    try:
        call_id, name = call["call_id"], call["name"]
    except KeyError as exc:
        raise GateUsageError(f"a call mapping needs {exc.args[0]!r}") from None
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise GateUsageError("call_id and name must be non-empty strings")
    arguments = call.get("arguments")
    raw: str | None = None
    if isinstance(arguments, str | bytes):
        raw = arguments.decode("utf-8") if isinstance(arguments, bytes) else arguments
        arguments = None
    status = CallStatus(call.get("status", CallStatus.COMPLETE.value))
    return ToolCall(
        call_id=call_id,
        name=name,
        status=status,
        arguments=arguments,  # may be a non-object: the gate rejects it with a reason
        raw_arguments=raw,
        reason=call.get("reason"),
        kind=call.get("kind", "function"),
        provider=call.get("provider"),
    )


def _unstorable(text: str, limit: int) -> str | None:
    """Why ``text`` cannot be kept in a ledger column of ``limit`` characters, if so.

    PostgreSQL refuses text longer than its column, NUL characters and lone
    surrogates; SQLite takes them all. Both backends answer alike by refusing here.
    """
    if len(text) > limit:
        return f"is longer than {limit} characters"
    if "\x00" in text:
        return "holds a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode text (a lone surrogate)"
    return None


def _stand_in(text: str) -> str:
    """A storable id for an unstorable one: the same text always maps to the same
    row (a replay finds it), and no part of the model's text is kept."""
    return "unstorable:" + sha256_hex(text.encode("utf-8", "surrogatepass"))[:48]


def _storable_identifiers(call: ToolCall) -> tuple[ToolCall, Ruling | None]:
    """``call`` with stand-ins for a model-chosen id or tool name the ledger cannot
    store, and the rejection of that call (its siblings are unaffected)."""
    id_problem = _unstorable(call.call_id, ID_LEN)
    name_problem = _unstorable(call.name, TOOL_NAME_LEN)
    if id_problem is None and name_problem is None:
        return call, None
    problems = [f"call id {id_problem}"] if id_problem else []
    problems += [f"tool name {name_problem}"] if name_problem else []
    call = replace(
        call,
        call_id=_stand_in(call.call_id) if id_problem else call.call_id,
        name=_stand_in(call.name) if name_problem else call.name,
    )
    return call, _reject(
        R.IDENTIFIER_UNSTORABLE,
        f"the {' and the '.join(problems)}; recorded under a stand-in, not run",
    )


def check_task_id(task_id: str) -> None:
    """Refuse a task id no ledger column can hold (the caller chose it: a usage error)."""
    if not isinstance(task_id, str) or not task_id:
        raise GateUsageError("task_id must be a non-empty string")
    problem = _unstorable(task_id, ID_LEN)
    if problem is not None:
        raise GateUsageError(f"task_id {problem}; choose a shorter plain-text task id")
