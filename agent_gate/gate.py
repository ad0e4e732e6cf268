"""The gate: a complete tool call in, at most one execution, an outcome out.

``Gate.execute`` drives one call through the ledger's state machine
(``agent_gate.ledger.states``): record it, validate it, authorize it, commit
``executing`` with a lease, run the tool, commit the outcome. It is written as a
resumable driver rather than a straight line, because the same call can arrive in
any state: again after it finished (a replayed stream: the stored outcome is
returned), while another worker runs it (``in progress``), after its worker died
(``in_doubt``, re-run only if the tool is retry-safe or its reconcile hook says the
write did not happen), or half-way through a crash (``received``/``authorized``:
carried on from there).

The driver (``_drive``) is a generator that does all database work itself and
yields only the two things that differ between sync and async callers: running
the tool, and calling a reconcile hook. ``execute`` and ``aexecute`` serve those
requests in their own way, so both share one implementation of the semantics.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterable,
    Mapping,
)
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel

from agent_gate.accumulate import Accumulator, Anomaly, DispatchMode
from agent_gate.calls import CallStatus, Terminal, ToolCall
from agent_gate.errors import AgentGateError
from agent_gate.ledger.canonical import (
    arguments_hash,
    canonical_json,
    raw_arguments_hash,
    sha256_hex,
    to_jsonable,
)
from agent_gate.ledger.lease import Liveness, liveness, now_ms, this_owner
from agent_gate.ledger.privacy import bound, describe_error
from agent_gate.ledger.states import CallState, Event
from agent_gate.ledger.store import CallRecord, Ledger, NewCall, StoredResult, Transition
from agent_gate.schema import (
    ArgumentsInvalid,
    ArgumentsNotObject,
    CallInfo,
    Effect,
    Idempotency,
    Reconciled,
    Reconciliation,
    Tool,
    ToolRegistry,
    ToolSpec,
    json_type_name,
    parse_arguments,
)

__all__ = [
    "AmbiguousCall",
    "Authorizer",
    "Decision",
    "Gate",
    "GateUsageError",
    "NotInDoubt",
    "Outcome",
    "OutcomeUnknown",
    "ReasonCode",
    "RunResult",
    "Verdict",
    "current_call",
    "render_tool_result",
]

DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_MAX_RESULT_BYTES = 256 * 1024
_MAX_DRIVER_STEPS = 16


# --------------------------------------------------------------------------- errors


class OutcomeUnknown(AgentGateError):
    """Raise from a tool when it cannot tell whether its write happened.

    A timeout after the request was sent is the typical case: the gate records the
    call ``in_doubt`` instead of ``failed``, so nothing retries it blindly.
    """


class GateUsageError(AgentGateError):
    """The gate was called in a way it cannot honour (e.g. an async tool in a running loop)."""


class NotInDoubt(AgentGateError):
    """``resolve`` was asked to settle a call that is not ``in_doubt``."""


class AmbiguousCall(AgentGateError):
    """A call id matched calls in several tasks; name the task."""


class ReasonCode(StrEnum):
    """Machine-readable reasons, stored in ``tool_calls.reason_code``."""

    ALLOWED = "allowed"
    UNKNOWN_TOOL = "unknown_tool"
    ARGUMENTS_NOT_OBJECT = "arguments_not_object"
    ARGUMENTS_NOT_JSON = "arguments_not_json"
    SCHEMA_INVALID = "schema_invalid"
    POLICY_DENIED = "policy_denied"
    AWAITING_APPROVAL = "awaiting_approval"
    ARGUMENTS_INCOMPLETE = "arguments_incomplete"
    STREAM_REJECTED = "stream_rejected"
    RESPONSE_NOT_COMPLETED = "response_not_completed"
    CONFLICT = "conflict"
    IN_PROGRESS = "in_progress"
    OWNER_DEAD = "owner_dead"
    LEASE_EXPIRED = "lease_expired"
    OUTCOME_UNKNOWN = "outcome_unknown"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    TOOL_ERROR = "tool_error"
    RECONCILED = "reconciled"
    RECONCILE_ERROR = "reconcile_error"
    RETRIED = "retried"
    RESOLVED = "resolved"
    LATE_OUTCOME = "late_outcome"
    TOOL_UNAVAILABLE = "tool_unavailable"


R = ReasonCode


# ------------------------------------------------------------------ authorization


class Verdict(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    APPROVE = "approve"
    """Needs a human approval before it may run."""


@dataclass(frozen=True, slots=True)
class Decision:
    """An authorization decision and what it rests on (for the audit trail)."""

    verdict: Verdict
    reason: str | None = None
    rule_ids: tuple[str, ...] = ()
    policy_hash: str | None = None


class Authorizer(Protocol):
    """What ``Gate(policy=...)`` needs from a policy: one decision per call.

    Called once, when a ``received`` call has passed schema validation; never
    for a call that is replayed from the ledger.
    """

    def authorize(self, task_id: str, call: CallInfo, spec: ToolSpec) -> Decision: ...


# ------------------------------------------------------------------- call context

_current: contextvars.ContextVar[CallInfo | None] = contextvars.ContextVar(
    "agent_gate_current_call", default=None
)


def current_call() -> CallInfo:
    """The call the running tool serves; ``idempotency_key`` is for downstream APIs."""
    info = _current.get()
    if info is None:
        raise GateUsageError("current_call() is only available inside a tool run by the gate")
    return info


def _stable_key(task_id: str, idem_key: str) -> str:
    # Stable across attempts and processes, opaque to the downstream service.
    return "ag-" + sha256_hex(f"{task_id}\x00{idem_key}")[:40]


# ------------------------------------------------------------------------ outcome


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one call, as the agent and the operator need to know it.

    ``replayed`` is True when this outcome was read from the ledger rather than
    produced now (the tool was not called by this invocation). ``result`` is the
    tool's JSON-able return value; after a replay it is what the ledger stored
    (``None`` with ``result_omitted`` when it was too large to keep).
    """

    task_id: str
    call_id: str
    tool: str
    state: CallState
    replayed: bool
    code: str | None = None
    reason: str | None = None
    result: Any = None
    error: Mapping[str, Any] | None = None
    attempt: int = 0
    duplicate_of: str | None = None
    result_omitted: bool = False
    exception: BaseException | None = field(default=None, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return self.state is CallState.SUCCEEDED

    @property
    def ran(self) -> bool | None:
        """Did the tool run (at any time)? ``None``: unknown (in doubt, running)."""
        return self.state.ran

    def to_dict(self) -> dict[str, Any]:
        """The JSON form ``agent-gate replay --json`` prints (plus code and attempt)."""
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "state": self.state.value,
            "replayed": self.replayed,
            "reason": self.reason,
            "code": self.code,
            "attempt": self.attempt,
            **({"duplicate_of": self.duplicate_of} if self.duplicate_of else {}),
        }

    # -- rendering for the model -------------------------------------------------

    def tool_output(self) -> str:
        """Text the model reads as the tool's result; explicit when nothing ran."""
        if self.state is CallState.SUCCEEDED and not self.result_omitted:
            if isinstance(self.result, str):
                return self.result
            return json.dumps(self.result, ensure_ascii=False)
        body: dict[str, Any] = {"status": self.state.value}
        executed = self.state.ran
        body["executed"] = "unknown" if executed is None else executed
        if self.state is CallState.SUCCEEDED:
            body["note"] = "the tool succeeded; its result was too large to keep"
        if self.error:
            body["error"] = dict(self.error)
        if self.reason:
            body["reason"] = self.reason
        if self.state is CallState.IN_DOUBT:
            body["note"] = (
                "it is unknown whether this call took effect; it will not be retried "
                "automatically. Do not assume it succeeded or repeat it."
            )
        return json.dumps(body, ensure_ascii=False)

    @property
    def is_error(self) -> bool:
        return self.state is not CallState.SUCCEEDED

    def to_openai_responses(self) -> dict[str, Any]:
        return {
            "type": "function_call_output",
            "call_id": self.call_id,
            "output": self.tool_output(),
        }

    def to_openai_chat(self) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": self.call_id, "content": self.tool_output()}

    def to_anthropic(self) -> dict[str, Any]:
        return {
            "type": "tool_result",
            "tool_use_id": self.call_id,
            "content": self.tool_output(),
            "is_error": self.is_error,
        }

    def to_gemini(self) -> dict[str, Any]:
        key = "error" if self.is_error else "result"
        try:
            payload: Any = json.loads(self.tool_output())
        except ValueError:
            payload = self.tool_output()
        return {
            "functionResponse": {"id": self.call_id, "name": self.tool, "response": {key: payload}}
        }


_RENDERERS: dict[str, Callable[[Outcome], dict[str, Any]]] = {
    "openai-responses": Outcome.to_openai_responses,
    "openai-chat": Outcome.to_openai_chat,
    "anthropic": Outcome.to_anthropic,
    "gemini": Outcome.to_gemini,
}


def render_tool_result(outcome: Outcome, provider: str) -> dict[str, Any]:
    """The message/block that answers ``outcome``'s call in ``provider``'s protocol."""
    try:
        return _RENDERERS[provider](outcome)
    except KeyError:
        raise GateUsageError(
            f"no tool-result format for provider {provider!r}; "
            f"known: {', '.join(sorted(_RENDERERS))}"
        ) from None


@dataclass(frozen=True, slots=True)
class RunResult:
    """Everything ``Gate.run`` saw: one outcome per tool call, and how the response ended."""

    outcomes: tuple[Outcome, ...]
    terminal: Terminal | None
    error: str | None = None
    """Set when the stream itself was abandoned (a limit, a decoding error)."""
    anomalies: tuple[Anomaly, ...] = ()

    def tool_results(self, provider: str) -> list[dict[str, Any]]:
        """Tool-result messages for every call, so no call is left dangling."""
        return [render_tool_result(o, provider) for o in self.outcomes]


# ------------------------------------------------------------- driver requests


@dataclass(slots=True)
class _Claimed:
    """A call this process has committed to ``executing`` and must now run."""

    rec: CallRecord
    tool: Tool
    validated: Mapping[str, Any] | BaseModel
    info: CallInfo
    call_id: str
    duplicate_of: str | None


@dataclass(frozen=True, slots=True)
class _Ran:
    kind: str  # "ok" | "error" | "unknown" | "timeout" | "interrupted"
    value: Any = None
    exc: BaseException | None = None
    pending: Future[_Ran] | None = None
    """A sync tool still running on its thread after a timeout or interruption: its
    eventual outcome settles the call late, once the in-doubt state is committed."""


@dataclass(frozen=True, slots=True)
class _Run:
    claimed: _Claimed


@dataclass(frozen=True, slots=True)
class _Reconcile:
    hook: Callable[[CallInfo], Any]
    info: CallInfo


@dataclass(frozen=True, slots=True)
class _HookFailed:
    exc: BaseException


_Request = _Run | _Reconcile
_Driver = Generator[_Request, Any, Outcome]


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _normalize_verdict(value: Any) -> Reconciled:
    if isinstance(value, Reconciled):
        return value
    raw = getattr(value, "value", value)
    return Reconciled(Reconciliation(raw))


# --------------------------------------------------------------------------- gate


class Gate:
    """Binds a ``ToolRegistry`` to a ledger and runs each complete call at most once.

    ``db`` is a database URL (default ``$AGENT_GATE_DB``, else
    ``sqlite:///agent_gate.db``) or an open ``Ledger``. ``policy`` decides
    allow/deny/approve per call; without one every registered tool with valid
    arguments is allowed. ``lease_seconds`` is how long a worker's claim on a
    running call lasts without renewal (it is renewed while the tool runs).
    """

    def __init__(
        self,
        tools: ToolRegistry,
        db: str | Ledger | None = None,
        *,
        policy: Authorizer | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        auto_upgrade: bool | None = None,
    ) -> None:
        if lease_seconds <= 0:
            raise GateUsageError("lease_seconds must be positive")
        self.tools = tools
        self._owns_ledger = not isinstance(db, Ledger)
        self.ledger = db if isinstance(db, Ledger) else Ledger(db, auto_upgrade=auto_upgrade)
        self.policy = policy
        self.lease_ms = int(lease_seconds * 1000)
        self.max_result_bytes = max_result_bytes

    @property
    def owner(self) -> str:
        """This process's lease-owner id (re-derived after a fork)."""
        return this_owner()

    def close(self) -> None:
        if self._owns_ledger:
            self.ledger.close()

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ public API

    def execute(self, task_id: str, call: ToolCall | Mapping[str, Any]) -> Outcome:
        """Run ``call`` for ``task_id`` unless the ledger says it ran, runs, or may not."""
        return self._serve_sync(self._drive_call(task_id, _as_call(call), None))

    async def aexecute(self, task_id: str, call: ToolCall | Mapping[str, Any]) -> Outcome:
        """``execute`` for async code: database work off the loop, tools on it."""
        return await self._serve_async(self._drive_call(task_id, _as_call(call), None))

    def recover(self, task_id: str | None = None) -> list[Outcome]:
        """Sweep calls left ``executing`` by dead workers, and settle what is in doubt.

        A call whose owner is gone becomes ``in_doubt``. An in-doubt call is then
        settled by its tool's reconcile hook, or re-run if its tool is retry-safe
        (``natural`` or ``key``), or left ``in_doubt`` for an operator. Calls still
        running under a live lease are reported ``executing`` and left alone.
        """
        return [
            self._serve_sync(self._drive_record(rec))
            for rec in self.ledger.calls(task_id, [CallState.EXECUTING, CallState.IN_DOUBT])
        ]

    async def arecover(self, task_id: str | None = None) -> list[Outcome]:
        recs = await asyncio.to_thread(
            self.ledger.calls, task_id, [CallState.EXECUTING, CallState.IN_DOUBT]
        )
        return [await self._serve_async(self._drive_record(rec)) for rec in recs]

    def resolve(
        self,
        call: str | Outcome | ToolCall,
        *,
        as_: Reconciliation | str,
        task_id: str | None = None,
        result: Any = None,
        note: str | None = None,
        by: str | None = None,
    ) -> Outcome:
        """An operator settles an in-doubt call: it ``succeeded``, ``failed``, or was
        ``not_applied`` (which makes it runnable again when the call is next seen)."""
        call_id = call if isinstance(call, str) else call.call_id
        if task_id is None and isinstance(call, Outcome):
            task_id = call.task_id
        recs = self.ledger.find(call_id, task_id)
        if not recs:
            raise GateUsageError(f"no call {call_id!r} in the ledger")
        if len(recs) > 1:
            raise AmbiguousCall(f"call id {call_id!r} exists in {len(recs)} tasks; pass task_id")
        try:
            verdict = Reconciliation(str(getattr(as_, "value", as_)).replace("-", "_"))
        except ValueError:
            raise GateUsageError(
                f"as_ must be one of {', '.join(r.value for r in Reconciliation)}"
            ) from None
        actor = f"operator:{by}" if by else "operator"
        rec = recs[0]
        if rec.state is CallState.EXECUTING:
            alive, code = self._lease_alive(rec)
            if alive:
                raise NotInDoubt(f"call {call_id!r} is running under a live lease")
            rec = self.ledger.lose_if_abandoned(
                rec,
                actor=actor,
                expired_only=code is R.LEASE_EXPIRED,
                code=code,
                reason="owner gone when an operator resolved it",
            ).record
        if rec.state is not CallState.IN_DOUBT:
            raise NotInDoubt(f"call {call_id!r} is {rec.state.value}, not in_doubt")
        text = f"resolved by {by or 'an operator'} as {verdict.value}"
        if note:
            text += f": {bound(note, 300)}"
        if verdict is Reconciliation.NOT_APPLIED:
            tr = self.ledger.transition(rec, Event.RETRY, actor=actor, code=R.RESOLVED, reason=text)
        elif verdict is Reconciliation.SUCCEEDED:
            tr = self.ledger.finish(
                rec,
                Event.SETTLE_SUCCEEDED,
                actor=actor,
                code=R.RESOLVED,
                reason=text,
                result=StoredResult.encode(to_jsonable(result), self.max_result_bytes),
            )
        else:
            tr = self.ledger.finish(
                rec,
                Event.SETTLE_FAILED,
                actor=actor,
                code=R.RESOLVED,
                reason=text,
                error={"type": "ResolvedFailed", "message": bound(note or text, 300)},
            )
        if not tr.won:
            raise NotInDoubt(
                f"call {call_id!r} changed to {tr.record.state.value} while being resolved"
            )
        return self._outcome(tr.record, replayed=False)

    def calls(self, task_id: str) -> list[Outcome]:
        """Every recorded call of a task, as stored (``replayed=True``)."""
        return [self._outcome(r, replayed=True) for r in self.ledger.calls(task_id)]

    # ------------------------------------------------------------- pipeline

    def dispatch_mode(self, tool_name: str) -> DispatchMode:
        """When a call may run: reads as soon as complete, writes after the response."""
        tool = self.tools.get(tool_name)
        if tool is None:
            return DispatchMode.ON_RESPONSE_COMPLETE
        if tool.spec.dispatch is not None:
            return DispatchMode(tool.spec.dispatch)
        if tool.spec.effect is Effect.READ:
            return DispatchMode.ON_CALL_COMPLETE
        return DispatchMode.ON_RESPONSE_COMPLETE

    def run(
        self,
        events: Iterable[object],
        *,
        task_id: str,
        provider: str,
        dispatch: Callable[[str], DispatchMode] | DispatchMode | None = None,
        accumulator: Accumulator | None = None,
    ) -> RunResult:
        """Drive a response's events through accumulator and gate, calls as they complete.

        ``events`` are SSE events (``ServerSentEvent``), mappings or SDK event
        objects of ``provider``'s protocol. A write whose response then ended
        without success is recorded ``incomplete`` and not run. If the event source
        raises, held calls are still recorded as not run before the error propagates.
        Pass ``accumulator`` (see ``accumulator_for``) when the source reconnects, so
        that the transport can tell it a new connection began (``reconnected()``)
        and events the server replays are recognised as such.
        """
        acc = accumulator or self.accumulator_for(provider, dispatch)
        outcomes: list[Outcome] = []
        error: str | None = None
        source = iter(events)
        try:
            while True:
                # Only the stream's own failures end the run quietly; an error of the
                # gate or the ledger while handling a call propagates.
                try:
                    released = acc.feed(next(source))
                except StopIteration:
                    break
                except AgentGateError as exc:
                    error = str(exc)
                    break
                for call in released:
                    outcomes.extend(self._released(task_id, call, acc.terminal, dispatch))
        finally:
            for call in acc.close():
                outcomes.extend(self._released(task_id, call, acc.terminal, dispatch))
            self._after_run(task_id, acc)
        return RunResult(tuple(outcomes), acc.terminal, error, acc.anomalies)

    async def arun(
        self,
        events: AsyncIterable[object] | Iterable[object],
        *,
        task_id: str,
        provider: str,
        dispatch: Callable[[str], DispatchMode] | DispatchMode | None = None,
        accumulator: Accumulator | None = None,
    ) -> RunResult:
        """``run`` for async event sources and async tools."""
        acc = accumulator or self.accumulator_for(provider, dispatch)
        outcomes: list[Outcome] = []
        error: str | None = None

        async def handle(calls: list[ToolCall]) -> None:
            for call in calls:
                gen = self._released_driver(task_id, call, acc.terminal, dispatch)
                if gen is not None:
                    outcomes.append(await self._serve_async(gen))

        source = _aiterate(events)
        try:
            while True:
                try:
                    released = acc.feed(await anext(source))
                except StopAsyncIteration:
                    break
                except AgentGateError as exc:
                    error = str(exc)
                    break
                await handle(released)
        finally:
            await handle(acc.close())
            await asyncio.to_thread(self._after_run, task_id, acc)
        return RunResult(tuple(outcomes), acc.terminal, error, acc.anomalies)

    def accumulator_for(
        self,
        provider: str,
        dispatch: Callable[[str], DispatchMode] | DispatchMode | None = None,
    ) -> Accumulator:
        """The accumulator ``run`` would use, for a caller that must hold it."""
        return Accumulator(provider, dispatch=self._mode_fn(dispatch))

    def _mode_fn(
        self, dispatch: Callable[[str], DispatchMode] | DispatchMode | None
    ) -> Callable[[str], DispatchMode]:
        if dispatch is None:
            return self.dispatch_mode
        if isinstance(dispatch, DispatchMode):
            mode = dispatch
            return lambda _name: mode
        return dispatch

    def _released_driver(
        self,
        task_id: str,
        call: ToolCall,
        terminal: Terminal | None,
        dispatch: Callable[[str], DispatchMode] | DispatchMode | None,
    ) -> _Driver | None:
        if call.status is CallStatus.PROVIDER_EXECUTED:
            return None  # the provider ran it; not ours to record or run
        early: tuple[Event, str, str] | None = None
        deferred = self._mode_fn(dispatch)(call.name) is DispatchMode.ON_RESPONSE_COMPLETE
        if call.complete and deferred and not (terminal is not None and terminal.succeeded):
            ended = str(terminal) if terminal is not None else "truncated"
            early = (
                Event.MARK_INCOMPLETE,
                R.RESPONSE_NOT_COMPLETED,
                f"the response ended {ended} before completing; this call waits for a "
                "completed response and was not run",
            )
        return self._drive_call(task_id, call, early)

    def _released(
        self,
        task_id: str,
        call: ToolCall,
        terminal: Terminal | None,
        dispatch: Callable[[str], DispatchMode] | DispatchMode | None,
    ) -> list[Outcome]:
        gen = self._released_driver(task_id, call, terminal, dispatch)
        return [] if gen is None else [self._serve_sync(gen)]

    def _after_run(self, task_id: str, acc: Accumulator) -> None:
        terminal = acc.terminal
        if terminal is not None:
            self.ledger.record_terminal(task_id, terminal.kind.value, terminal.reason)
        for anomaly in acc.anomalies:
            if not (anomaly.after_release and anomaly.call_id):
                continue
            rec = self.ledger.get(task_id, anomaly.call_id)
            if rec is not None:
                self.ledger.note(
                    rec,
                    "stream_anomaly_after_release",
                    actor=self.owner,
                    detail={"reason": anomaly.reason, "event_index": anomaly.event_index},
                )

    # ------------------------------------------------------------ driving

    def _serve_sync(self, gen: _Driver) -> Outcome:
        answer: Any = None
        try:
            while True:
                request = gen.send(answer)
                if isinstance(request, _Run):
                    answer = self._run_sync(request.claimed)
                else:
                    answer = self._reconcile_sync(request)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    async def _serve_async(self, gen: _Driver) -> Outcome:
        answer: Any = None
        while True:
            done, value = await asyncio.to_thread(_step, gen, answer)
            if done:
                return value  # type: ignore[no-any-return]
            if isinstance(value, _Run):
                answer = await self._run_async(value.claimed)
            else:
                answer = await self._reconcile_async(value)

    def _drive_call(
        self, task_id: str, call: ToolCall, early: tuple[Event, str, str] | None
    ) -> _Driver:
        """Record an incoming call (or find it), then drive its row."""
        if call.status is CallStatus.PROVIDER_EXECUTED:
            raise GateUsageError(
                f"call {call.call_id!r} was executed by the provider; the gate does not run it"
            )
        tool = self.tools.get(call.name)
        arguments, pre = self._classify(call, tool)
        if early is None:
            early = pre
        key = f"call:{call.call_id}"
        if tool is not None and arguments is not None and early is None:
            values = tool.dedupe_values(arguments)
            if values is not None:
                key = f"dedupe:{call.name}:{sha256_hex(canonical_json(values))}"
        args_hash = _hash_of(
            arguments if arguments is not None else call.arguments, call.raw_arguments
        )
        spec = tool.spec if tool is not None else None
        rec, inserted = self.ledger.record(
            NewCall(
                task_id=task_id,
                call_id=call.call_id,
                idem_key=key,
                tool=call.name,
                effect=spec.effect.value if spec else "unknown",
                idempotency=spec.idempotency.value if spec else "unknown",
                args_hash=args_hash,
                arguments=arguments,
            ),
            provider=call.provider,
            actor=self.owner,
        )
        duplicate_of = rec.call_id if rec.call_id != call.call_id else None
        conflict = rec.tool != call.name or (
            call.complete and rec.state is not CallState.INCOMPLETE and rec.args_hash != args_hash
        )
        if conflict:
            what = "a different tool" if rec.tool != call.name else "different arguments"
            self.ledger.note(
                rec,
                "conflict",
                actor=self.owner,
                call_id=call.call_id,
                detail={
                    "args_hash": args_hash,
                    "stored_args_hash": rec.args_hash,
                    "tool": call.name,
                },
            )
            held_by = f"call {rec.call_id!r}" if duplicate_of else "this call id"
            return self._outcome(
                rec,
                replayed=False,
                call_id=call.call_id,
                state=CallState.REJECTED,
                code=R.CONFLICT,
                reason=(
                    f"conflict: {held_by} was recorded with {what} "
                    f"(sha256 {rec.args_hash[:12]} != {args_hash[:12]}); not run"
                ),
                duplicate_of=duplicate_of,
            )
        if not inserted:
            self.ledger.note(
                rec,
                "seen_again",
                actor=self.owner,
                call_id=call.call_id,
                detail={"duplicate_of": duplicate_of} if duplicate_of else None,
            )
        outcome = yield from self._advance(
            rec, early=early, call_id=call.call_id, duplicate_of=duplicate_of
        )
        return outcome

    def _drive_record(self, rec: CallRecord) -> _Driver:
        outcome = yield from self._advance(rec, early=None, call_id=rec.call_id, duplicate_of=None)
        return outcome

    def _classify(
        self, call: ToolCall, tool: Tool | None
    ) -> tuple[dict[str, Any] | None, tuple[Event, str, str] | None]:
        """The call's argument object (if any), and why it can never run (if so)."""
        if call.status is CallStatus.INCOMPLETE:
            why = call.reason or "unknown"
            return None, (
                Event.MARK_INCOMPLETE,
                R.ARGUMENTS_INCOMPLETE,
                f"the arguments never completed ({why}); not run",
            )
        if call.status is CallStatus.REJECTED:
            why = call.reason or "unknown"
            code = R.ARGUMENTS_NOT_OBJECT if why == "arguments_not_object" else R.STREAM_REJECTED
            return None, (
                Event.REJECT,
                code,
                f"the stream delivered this call unusably ({why}); not run",
            )
        if tool is None:
            return None, (
                Event.REJECT,
                R.UNKNOWN_TOOL,
                f"no tool named {call.name!r} is registered; not run",
            )
        arguments: Any = call.arguments
        if arguments is None:
            if call.kind != "function":
                return None, (
                    Event.REJECT,
                    R.ARGUMENTS_NOT_OBJECT,
                    f"a {call.kind} call carries free text, and {call.name!r} "
                    "takes a JSON object; not run",
                )
            try:
                arguments = parse_arguments(call.raw_arguments or "")
            except ValueError:
                return None, (
                    Event.REJECT,
                    R.ARGUMENTS_NOT_OBJECT,
                    "the arguments are not valid JSON; not run",
                )
        if not isinstance(arguments, Mapping):
            return None, (
                Event.REJECT,
                R.ARGUMENTS_NOT_OBJECT,
                f"the arguments are a JSON {json_type_name(arguments)}, not an object; not run",
            )
        try:
            canonical_json(arguments)
        except (TypeError, ValueError):
            return None, (
                Event.REJECT,
                R.ARGUMENTS_NOT_JSON,
                "the arguments are not JSON data (NaN, Infinity, non-string keys "
                "or other objects); not run",
            )
        return dict(arguments), None

    def _advance(
        self,
        rec: CallRecord,
        *,
        early: tuple[Event, str, str] | None,
        call_id: str,
        duplicate_of: str | None,
    ) -> _Driver:
        """Move the row forward from whatever state it is in, one CAS at a time."""
        # ``replayed`` is False only when this invocation made the transition that
        # produced the state it reports: losing a race to another worker, or finding the
        # row already there, means the outcome was read, not produced.
        acted = False
        extra: dict[str, Any] = {"call_id": call_id, "duplicate_of": duplicate_of}
        for _ in range(_MAX_DRIVER_STEPS):
            state = rec.state
            if state is CallState.RECEIVED:
                event, code, reason, detail = self._decide(rec, early)
                tr = self.ledger.transition(
                    rec, event, actor=self.owner, code=code, reason=reason, detail=detail
                )
                rec, acted = tr.record, tr.won
                continue
            if state is CallState.AUTHORIZED:
                claimed = self._claim(rec, call_id, duplicate_of)
                if isinstance(claimed, CallRecord):
                    if claimed.version != rec.version:
                        acted = False  # lost the claim: someone else moved it
                    rec = claimed
                    if rec.state is CallState.AUTHORIZED:
                        # Cannot run here (tool missing or invalid now): report, leave it.
                        return self._outcome(rec, replayed=not acted, **extra)
                    continue
                ran = yield _Run(claimed)
                return self._finish(claimed, ran)
            if state is CallState.EXECUTING:
                alive, code = self._lease_alive(rec)
                if alive:
                    return self._outcome(
                        rec,
                        replayed=True,
                        code=R.IN_PROGRESS,
                        reason=f"running under another worker (attempt {rec.attempt}); "
                        "not started again",
                        **extra,
                    )
                tr = self.ledger.lose_if_abandoned(
                    rec,
                    actor=self.owner,
                    expired_only=code is R.LEASE_EXPIRED,
                    code=code,
                    reason=(
                        "the worker running this call died; whether it took effect is unknown"
                        if code is R.OWNER_DEAD
                        else "the worker's lease expired; whether it took effect is unknown"
                    ),
                )
                rec, acted = tr.record, tr.won
                continue
            if state is CallState.IN_DOUBT:
                settled = yield from self._settle(rec)
                if settled is None:
                    return self._outcome(rec, replayed=not acted, **extra)
                rec, acted = settled.record, settled.won
                continue
            # awaiting_approval or terminal: report what is stored.
            return self._outcome(rec, replayed=not acted, **extra)
        return self._outcome(rec, replayed=not acted, **extra)  # pragma: no cover

    def _decide(
        self, rec: CallRecord, early: tuple[Event, str, str] | None
    ) -> tuple[Event, str, str | None, dict[str, Any] | None]:
        """Validation and authorization of a ``received`` call: which arrow to take."""
        if early is not None:
            return early[0], early[1], early[2], None
        tool = self.tools.get(rec.tool)
        if tool is None:
            return (
                Event.REJECT,
                R.UNKNOWN_TOOL,
                f"no tool named {rec.tool!r} is registered; not run",
                None,
            )
        if rec.arguments is None:
            return (
                Event.REJECT,
                R.ARGUMENTS_NOT_OBJECT,
                "the arguments are not a JSON object; not run",
                None,
            )
        try:
            tool.validate(rec.arguments)
        except ArgumentsInvalid as exc:
            errors = [{"pointer": e.pointer, "keyword": e.keyword} for e in exc.errors[:20]]
            listed = "; ".join(str(e) for e in exc.errors[:10])
            return (
                Event.REJECT,
                R.SCHEMA_INVALID,
                f"the arguments fail the schema of {rec.tool!r} at {listed}; not run",
                {"errors": errors},
            )
        if self.policy is None:
            return Event.ALLOW, R.ALLOWED, None, None
        decision = self.policy.authorize(rec.task_id, self._info(rec), tool.spec)
        detail = {
            "verdict": decision.verdict.value,
            "rule_ids": list(decision.rule_ids),
            "policy_hash": decision.policy_hash,
        }
        if decision.verdict is Verdict.ALLOW:
            return Event.ALLOW, R.ALLOWED, decision.reason, detail
        if decision.verdict is Verdict.APPROVE:
            return (
                Event.REQUIRE_APPROVAL,
                R.AWAITING_APPROVAL,
                decision.reason or "waits for a human approval",
                detail,
            )
        return (
            Event.REJECT,
            R.POLICY_DENIED,
            f"denied by policy: {decision.reason or 'no rule allows it'}; not run",
            detail,
        )

    def _info(self, rec: CallRecord) -> CallInfo:
        return CallInfo(
            task_id=rec.task_id,
            call_id=rec.call_id,
            tool=rec.tool,
            arguments=rec.arguments,
            idempotency_key=_stable_key(rec.task_id, rec.idem_key),
            attempt=rec.attempt,
        )

    def _runnable(self, rec: CallRecord) -> tuple[Tool, Mapping[str, Any] | BaseModel] | str:
        """The tool and its validated input for a stored call, or why it cannot run here."""
        tool = self.tools.get(rec.tool)
        if tool is None:
            return f"tool {rec.tool!r} is not registered in this process"
        try:
            return tool, tool.validate(rec.arguments)
        except (ArgumentsInvalid, ArgumentsNotObject) as exc:
            return f"stored arguments no longer pass the schema ({exc})"

    def _claim(
        self, rec: CallRecord, call_id: str, duplicate_of: str | None
    ) -> _Claimed | CallRecord:
        runnable = self._runnable(rec)
        if isinstance(runnable, str):
            return rec
        tool, validated = runnable
        if tool.is_async and _loop_running():
            raise GateUsageError(
                f"tool {tool.name!r} is async and an event loop is running: use aexecute"
            )
        tr = self.ledger.claim(rec, owner=self.owner, lease_ms=self.lease_ms)
        if not tr.won:
            return tr.record
        claimed_rec = tr.record
        return _Claimed(
            claimed_rec, tool, validated, self._info(claimed_rec), call_id, duplicate_of
        )

    def _lease_alive(self, rec: CallRecord) -> tuple[bool, ReasonCode]:
        if liveness(rec.lease_owner) is Liveness.DEAD:
            return False, R.OWNER_DEAD
        if rec.lease_expires_ms is None or rec.lease_expires_ms < now_ms():
            return False, R.LEASE_EXPIRED
        return True, R.IN_PROGRESS

    def _settle(self, rec: CallRecord) -> Generator[_Request, Any, Transition | None]:
        """Try to settle an in-doubt call; the transition tried, None if it stays."""
        tool = self.tools.get(rec.tool)
        if tool is None:
            return None
        hook = tool.spec.reconcile
        if hook is not None:
            answer = yield _Reconcile(hook, self._info(rec))
            if isinstance(answer, _HookFailed):
                self.ledger.note(
                    rec,
                    "reconcile_failed",
                    actor=self.owner,
                    detail={"error_type": type(answer.exc).__name__},
                )
                return None
            try:
                verdict = _normalize_verdict(answer)
            except ValueError:
                self.ledger.note(
                    rec,
                    "reconcile_failed",
                    actor=self.owner,
                    detail={"error_type": "InvalidReconcileAnswer"},
                )
                return None
            if verdict.status is Reconciliation.SUCCEEDED:
                tr = self.ledger.finish(
                    rec,
                    Event.SETTLE_SUCCEEDED,
                    actor="reconcile",
                    code=R.RECONCILED,
                    reason="the reconcile hook found that the write happened",
                    result=StoredResult.encode(to_jsonable(verdict.result), self.max_result_bytes),
                )
            elif verdict.status is Reconciliation.FAILED:
                tr = self.ledger.finish(
                    rec,
                    Event.SETTLE_FAILED,
                    actor="reconcile",
                    code=R.RECONCILED,
                    reason="the reconcile hook found that the call failed",
                    error={
                        "type": "Reconciled",
                        "message": bound(verdict.error or "failed downstream", 300),
                    },
                )
            else:
                if isinstance(self._runnable(rec), str):
                    return None
                tr = self.ledger.transition(
                    rec,
                    Event.RETRY,
                    actor="reconcile",
                    code=R.RECONCILED,
                    reason="the reconcile hook found that the write did not happen; "
                    "running it again",
                )
            return tr
        if Idempotency(rec.idempotency).retry_safe and not isinstance(self._runnable(rec), str):
            tr = self.ledger.transition(
                rec,
                Event.RETRY,
                actor=self.owner,
                code=R.RETRIED,
                reason=f"idempotency {rec.idempotency!r}: safe to run again",
            )
            return tr
        return None

    # ------------------------------------------------------------ running tools

    def _heartbeat(self, claimed: _Claimed) -> Callable[[], None]:
        """Renew the lease while the tool runs; returns the function that stops it."""
        stop = threading.Event()
        interval = max(self.lease_ms / 3000, 0.05)

        def beat() -> None:
            while not stop.wait(interval):
                try:
                    if not self.ledger.renew(claimed.rec, owner=self.owner, lease_ms=self.lease_ms):
                        return  # judged lost meanwhile; the outcome will settle late
                except Exception:  # a busy or unreachable database: try again next beat
                    continue

        thread = threading.Thread(target=beat, name="agent-gate-lease", daemon=True)
        thread.start()

        def halt() -> None:
            stop.set()
            thread.join(timeout=5)

        return halt

    def _run_sync(self, claimed: _Claimed) -> _Ran:
        tool, timeout = claimed.tool, claimed.tool.spec.timeout
        halt = self._heartbeat(claimed)
        future: Future[_Ran] | None = None
        try:
            if tool.is_async:
                return asyncio.run(self._invoke_async(claimed))
            if timeout is None:
                token = _current.set(claimed.info)
                try:
                    return _Ran("ok", tool.invoke(claimed.validated))
                except OutcomeUnknown as exc:
                    return _Ran("unknown", exc=exc)
                except Exception as exc:
                    return _Ran("error", exc=exc)
                finally:
                    _current.reset(token)
            future = self._start_thread(claimed)
            try:
                return future.result(timeout=timeout)
            except TimeoutError:
                return _Ran("timeout", pending=future)
        except BaseException as exc:
            # KeyboardInterrupt / SystemExit while the tool ran: record the doubt,
            # then let the interruption continue.
            self._finish(claimed, _Ran("interrupted", exc=exc, pending=future))
            raise
        finally:
            halt()

    async def _run_async(self, claimed: _Claimed) -> _Ran:
        tool, timeout = claimed.tool, claimed.tool.spec.timeout
        halt = self._heartbeat(claimed)
        future: Future[_Ran] | None = None
        try:
            if tool.is_async:
                return await self._invoke_async(claimed)
            future = self._start_thread(claimed)
            try:
                return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout)
            except TimeoutError:
                return _Ran("timeout", pending=future)
        except asyncio.CancelledError as exc:
            interrupted = _Ran("interrupted", exc=exc, pending=future)
            await asyncio.to_thread(self._finish, claimed, interrupted)
            raise
        finally:
            halt()

    async def _invoke_async(self, claimed: _Claimed) -> _Ran:
        token = _current.set(claimed.info)
        try:
            awaitable: Awaitable[Any] = claimed.tool.invoke(claimed.validated)
            value = await asyncio.wait_for(awaitable, claimed.tool.spec.timeout)
            return _Ran("ok", value)
        except TimeoutError:
            return _Ran("timeout")
        except OutcomeUnknown as exc:
            return _Ran("unknown", exc=exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return _Ran("error", exc=exc)
        finally:
            _current.reset(token)

    def _start_thread(self, claimed: _Claimed) -> Future[_Ran]:
        """Run a sync tool on its own daemon thread, so a timeout can stop waiting."""
        future: Future[_Ran] = Future()
        ctx = contextvars.copy_context()

        def target() -> None:
            _current.set(claimed.info)
            try:
                future.set_result(_Ran("ok", claimed.tool.invoke(claimed.validated)))
            except OutcomeUnknown as exc:
                future.set_result(_Ran("unknown", exc=exc))
            except BaseException as exc:
                future.set_result(_Ran("error", exc=exc))

        threading.Thread(
            target=ctx.run, args=(target,), name=f"agent-gate-{claimed.tool.name}", daemon=True
        ).start()
        return future

    def _reconcile_sync(self, request: _Reconcile) -> Any:
        try:
            answer = request.hook(request.info)
            if asyncio.iscoroutine(answer):
                answer = asyncio.run(answer)
            return answer
        except Exception as exc:
            return _HookFailed(exc)

    async def _reconcile_async(self, request: _Reconcile) -> Any:
        try:
            answer = request.hook(request.info)
            if asyncio.iscoroutine(answer):
                answer = await answer
            return answer
        except Exception as exc:
            return _HookFailed(exc)

    # ------------------------------------------------------------ outcomes

    def _finish(self, claimed: _Claimed, ran: _Ran) -> Outcome:
        """Commit what running the tool produced; the one place outcomes are written."""
        rec, owner = claimed.rec, self.owner
        value: Any = None
        if ran.kind == "ok":
            value = to_jsonable(ran.value)
            tr = self.ledger.finish(
                rec,
                Event.SUCCEED,
                actor=owner,
                lease_owner=owner,
                result=StoredResult.encode(value, self.max_result_bytes),
            )
        else:
            event, code, reason, error = self._failure(claimed, ran)
            tr = self.ledger.finish(
                rec, event, actor=owner, lease_owner=owner, error=error, code=code, reason=reason
            )
        final = tr.record
        if not tr.won:
            final = self._late(claimed, ran) or final
        elif ran.pending is not None:
            pending = ran.pending
            pending.add_done_callback(lambda f: self._late(claimed, f.result()))
        return self._outcome(
            final,
            replayed=False,
            call_id=claimed.call_id,
            duplicate_of=claimed.duplicate_of,
            result=value if final.state is CallState.SUCCEEDED and ran.kind == "ok" else None,
            exception=ran.exc,
        )

    def _failure(
        self, claimed: _Claimed, ran: _Ran
    ) -> tuple[Event, ReasonCode, str, dict[str, str] | None]:
        args = claimed.rec.arguments
        error = describe_error(ran.exc, args) if ran.exc is not None else None
        timeout = claimed.tool.spec.timeout
        if ran.kind == "error":
            kind = error["type"] if error else "an error"
            return Event.FAIL, R.TOOL_ERROR, f"the tool raised {kind}", error
        if ran.kind == "timeout":
            if claimed.tool.spec.effect is Effect.READ:
                return (Event.FAIL, R.TIMEOUT, f"the read timed out after {timeout}s", None)
            return (
                Event.LOSE,
                R.TIMEOUT,
                f"the tool did not return within {timeout}s; whether it took effect is unknown",
                None,
            )
        if ran.kind == "interrupted":
            return (
                Event.LOSE,
                R.INTERRUPTED,
                "the worker was interrupted while the tool ran; whether it took effect is unknown",
                error,
            )
        return (
            Event.LOSE,
            R.OUTCOME_UNKNOWN,
            "the tool reported that it cannot tell whether it took effect",
            error,
        )

    def _late(self, claimed: _Claimed, ran: _Ran) -> CallRecord | None:
        """The tool returned after its call was judged in doubt: settle it if still so."""
        current = self.ledger.get_row(claimed.rec.row_id)
        if current is None:
            return None
        same_attempt = current.attempt == claimed.rec.attempt
        if current.state is not CallState.IN_DOUBT or not same_attempt:
            self.ledger.note(
                current,
                "late_outcome_discarded",
                actor=self.owner,
                detail={"attempt": claimed.rec.attempt, "kind": ran.kind},
            )
            return None
        if ran.kind == "ok":
            tr = self.ledger.finish(
                current,
                Event.SETTLE_SUCCEEDED,
                actor=self.owner,
                code=R.LATE_OUTCOME,
                reason="the tool returned after its call was judged in doubt",
                result=StoredResult.encode(to_jsonable(ran.value), self.max_result_bytes),
            )
        elif ran.kind == "error":
            tr = self.ledger.finish(
                current,
                Event.SETTLE_FAILED,
                actor=self.owner,
                code=R.LATE_OUTCOME,
                reason="the tool raised after its call was judged in doubt",
                error=describe_error(ran.exc, current.arguments) if ran.exc else None,
            )
        else:
            return None
        return tr.record if tr.won else None

    def _outcome(
        self,
        rec: CallRecord,
        *,
        replayed: bool,
        call_id: str | None = None,
        state: CallState | None = None,
        code: str | None = None,
        reason: str | None = None,
        duplicate_of: str | None = None,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> Outcome:
        final = state or rec.state
        stored = rec.result if final is CallState.SUCCEEDED else None
        return Outcome(
            task_id=rec.task_id,
            call_id=call_id or rec.call_id,
            tool=rec.tool,
            state=final,
            replayed=replayed,
            code=str(code or rec.reason_code) if (code or rec.reason_code) else None,
            reason=reason if reason is not None else (rec.reason if state is None else None),
            result=result if result is not None else stored,
            error=rec.error if state is None else None,
            attempt=rec.attempt if state is None else 0,
            duplicate_of=duplicate_of,
            # The in-memory result of this run is whole even when the ledger kept a hash.
            result_omitted=rec.result_omitted and final is CallState.SUCCEEDED and result is None,
            exception=exception,
        )


def _hash_of(parsed: Any, raw: str | None) -> str:
    """The argument hash the conflict check compares: of the parsed value when it is
    JSON, else of the raw text (or, for values handed in that are not JSON, their repr)."""
    if parsed is not None:
        try:
            return arguments_hash(parsed)
        except (TypeError, ValueError):
            return raw_arguments_hash(repr(parsed))
    return raw_arguments_hash(raw)


async def _aiterate(events: AsyncIterable[object] | Iterable[object]) -> AsyncIterator[object]:
    if isinstance(events, AsyncIterable):
        async for event in events:
            yield event
    else:
        for event in events:
            yield event


def _step(gen: _Driver, answer: Any) -> tuple[bool, Any]:
    """Advance the driver once; StopIteration cannot cross a thread into a future."""
    try:
        return False, gen.send(answer)
    except StopIteration as stop:
        return True, stop.value


def _as_call(call: ToolCall | Mapping[str, Any]) -> ToolCall:
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
