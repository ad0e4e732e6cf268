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

With a policy (``Gate(tools, db, policy="policies/example.yaml")``) a call's
decision is taken *inside* the ledger transaction that commits it, with the task
locked, so the task's quota usage read for the decision is the usage the decision
charges (``Ledger.authorize``). A call the policy sends to a person waits in
``awaiting_approval``; once approved (``Gate.approve`` / ``agent-gate approve``) the
next gate that sees the call (``execute`` again, ``resume``) checks the approval
against the arguments, the policy hash and the clock, and consumes it in the same
transaction that commits ``executing`` (``Ledger.claim_approved``).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
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
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel
from sqlalchemy.exc import SQLAlchemyError

from agent_gate.accumulate import Accumulator, Anomaly, DispatchMode
from agent_gate.authorize import (
    PolicyAuthorizer,
    principal_from_json,
    principal_json,
    scope_from_json,
    scope_json,
)
from agent_gate.autodetect import DetectingAccumulator, accumulator
from agent_gate.calls import CallStatus, Terminal, ToolCall
from agent_gate.errors import AgentGateError
from agent_gate.heartbeat import LeaseKeeper
from agent_gate.ledger import approvals
from agent_gate.ledger import seal as sealing
from agent_gate.ledger.approvals import ApprovalRecord, NotAwaitingApproval
from agent_gate.ledger.canonical import (
    arguments_hash,
    canonical_json,
    raw_arguments_hash,
    sha256_hex,
    to_jsonable,
)
from agent_gate.ledger.lease import Liveness, liveness, now_ms, this_owner
from agent_gate.ledger.models import ID_LEN, TOOL_NAME_LEN
from agent_gate.ledger.outcome_store import (
    RESULT_UNSTORABLE,
    KeptResult,
    OutcomeScrub,
    keep_result,
)
from agent_gate.ledger.privacy import bound, clean_message, describe_error
from agent_gate.ledger.reasons import ReasonCode
from agent_gate.ledger.states import TERMINAL, CallState, Event
from agent_gate.ledger.store import (
    CallRecord,
    Ledger,
    NewCall,
    Ruling,
    StoredResult,
    Transition,
)
from agent_gate.ledger.txn import LedgerTxn
from agent_gate.plainjson import MAX_ARGUMENT_DEPTH, ArgumentsTooDeep, check_depth
from agent_gate.policy import Decision as PolicyDecision
from agent_gate.policy import DecisionEffect, Policy, Principal, TaskScope
from agent_gate.schema import (
    COERCION_UNSTABLE,
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
)
from agent_gate.strict_json import StrictParseError
from agent_gate.strict_json import parse_arguments as strict_arguments

__all__ = [
    "DEFAULT_APPROVAL_TTL",
    "AmbiguousCall",
    "ApprovalRefused",
    "Authorizer",
    "Blocker",
    "Decision",
    "Gate",
    "GateUsageError",
    "NotAwaitingApproval",
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
DEFAULT_APPROVAL_TTL = 24 * 3600.0
"""Seconds an approval stays usable unless the approver says otherwise."""
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


class ApprovalRefused(AgentGateError):
    """An approval cannot be given: the policy named for it denies the call."""


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
    """A custom decision-maker for ``Gate(policy=...)``: one decision per call.

    Called once, when a ``received`` call has passed schema validation; never
    for a call that is replayed from the ledger. It is called outside any ledger
    transaction (it may be slow, e.g. ask a remote service), so it cannot keep
    per-task quotas, and a call it sends to approval can be approved but is only run
    by a gate with a policy file (whose hash the approval is bound to). A policy
    file (``Policy``, a path, ``PolicyAuthorizer``) has none of these limits.
    """

    def authorize(self, task_id: str, call: CallInfo, spec: ToolSpec) -> Decision: ...


@dataclass(frozen=True, slots=True)
class Blocker:
    """A call that stands between a task and its completion, and what it needs."""

    call_id: str
    tool: str
    state: CallState
    needs: str
    """``approval``, ``resolution`` (in doubt), ``run`` (authorized or received: the
    next resume runs or decides it), ``nothing`` (running under a live lease) or
    ``none`` for ``incomplete`` calls, which never run (the model must ask again)."""
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "state": self.state.value,
            "needs": self.needs,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class _Context:
    """Principal and scope the application passed with a call (bound to its task)."""

    principal: str | None = None
    scope: str | None = None


_ASK_POLICY = object()
"""``_decide``'s answer when the policy file must decide inside the ledger."""


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
    tool's return value as JSON, as the ledger stored it: fields the policy redacts
    (``redact_result``) as stand-ins and the call's redacted argument values cut out
    of every string; after a replay ``None`` with ``result_omitted`` when it was too
    large to keep; a ``{"result_unstorable": ...}`` stand-in (code
    ``result_unstorable``) when it had no JSON form (NaN, bytes, a lone surrogate).
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
    arguments: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    """The call's arguments as the ledger recorded them: the value the policy judged,
    with the fields it redacts as their stand-ins (never unsealed); None when the
    call never had an argument object (unknown tool, text that is not an object)."""

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
        unstorable = self.code == RESULT_UNSTORABLE
        if self.state is CallState.SUCCEEDED and not self.result_omitted and not unstorable:
            if isinstance(self.result, str):
                return self.result
            return json.dumps(self.result, ensure_ascii=False)
        body: dict[str, Any] = {"status": self.state.value}
        executed = self.state.ran
        body["executed"] = "unknown" if executed is None else executed
        if self.state is CallState.SUCCEEDED:
            body["note"] = "the tool succeeded; its result was too large to keep"
            if unstorable:
                body["note"] = "the tool succeeded; its result has no JSON form to show"
                body["result"] = self.result
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
    provider: str | None = None
    """The wire protocol the events were read as: the one named, or the one
    ``provider="auto"`` detected (``auto`` if the stream never told)."""

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


def _closed(
    acc: Accumulator | DetectingAccumulator, error: str | None
) -> tuple[list[ToolCall], str | None]:
    """Close the accumulator at the end of a run: the calls it still releases, and
    the run's error (the stream's own failure at close, e.g. a stream none of whose
    events the adapter recognised, unless the run already ended with one)."""
    try:
        return acc.close(), error
    except AgentGateError as exc:
        return [], error or str(exc)


class _Held:
    """Calls released before the response ended that must wait for its end.

    The gate's accumulator never releases those early, but a caller's own
    accumulator (``run(accumulator=...)``) may have been built with a laxer dispatch
    mode than the gate's: a write the policy defers is held here until the
    terminal event instead of being judged "ended before completing".
    """

    def __init__(self, mode: Callable[[str], DispatchMode]) -> None:
        self.mode = mode
        self.calls: list[ToolCall] = []

    def due(
        self, released: Iterable[ToolCall], terminal: Terminal | None, *, final: bool = False
    ) -> list[ToolCall]:
        """The calls to hand to the gate now, in release order; the rest are kept."""
        if terminal is not None or final:
            due, self.calls = [*self.calls, *released], []
            return due
        due = []
        for call in released:
            deferred = self.mode(call.name) is DispatchMode.ON_RESPONSE_COMPLETE
            (self.calls if deferred and call.complete else due).append(call)
        return due


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
    allow/deny/approve per call: a policy file (a path, a ``Policy`` or a
    ``PolicyAuthorizer``: quotas, approvals bound to its hash, safer-only tool
    overrides, redaction) or a custom ``Authorizer``; without one every registered
    tool with valid arguments is allowed. ``principal`` and ``scope`` are the
    defaults for ``execute``/``run`` (bound to each task on first use).
    ``seal_key`` seals the fields the policy redacts (``agent_gate.ledger.seal``
    says where a key comes from otherwise). ``lease_seconds`` is how long a
    worker's claim on a running call lasts without renewal (it is renewed while the
    tool runs).
    """

    def __init__(
        self,
        tools: ToolRegistry,
        db: str | Ledger | None = None,
        *,
        policy: Authorizer | PolicyAuthorizer | Policy | str | os.PathLike[str] | None = None,
        principal: Principal | None = None,
        scope: TaskScope | None = None,
        seal_key: sealing.SealKey | bytes | str | os.PathLike[str] | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        auto_upgrade: bool | None = None,
        create: bool = False,
    ) -> None:
        if lease_seconds <= 0:
            raise GateUsageError("lease_seconds must be positive")
        if isinstance(policy, Policy | str | os.PathLike):
            policy = PolicyAuthorizer(policy)
        self.tools = tools
        self.policy = policy
        self.rules: PolicyAuthorizer | None = (
            policy if isinstance(policy, PolicyAuthorizer) else None
        )
        self.principal = principal
        self.scope = scope
        self.lease_ms = int(lease_seconds * 1000)
        self._leases: LeaseKeeper[CallRecord] = LeaseKeeper(
            self._renew, max(self.lease_ms / 3000, 0.05)
        )
        self.max_result_bytes = max_result_bytes
        self._owns_ledger = not isinstance(db, Ledger)
        self.ledger = (
            db if isinstance(db, Ledger)
            else Ledger(db, auto_upgrade=auto_upgrade, create=create)  # create: a new SQLite file
        )
        try:
            self._seal_source = seal_key
            self.seal_key = sealing.resolve(seal_key, self.ledger.url)
            if (
                self.rules is not None
                and self.rules.redacts_anything
                and self.seal_key is None
                and sealing.default_key_path(self.ledger.url) is None
            ):
                raise sealing.SealKeyMissing(
                    "the policy redacts argument fields, which the ledger stores sealed: "
                    f"give every worker the same key (${sealing.ENV_KEY} or "
                    f"${sealing.ENV_KEY_FILE}, or seal_key=)"
                )
        except BaseException:
            self.close()
            raise
        self.override_notes: tuple[str, ...] = tuple(
            note
            for tool in tools
            for note in (self.rules.effective(tool.spec).notes if self.rules else ())
        )
        """Policy overrides that were ignored because they were less careful than the code."""

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

    def execute(
        self,
        task_id: str,
        call: ToolCall | Mapping[str, Any],
        *,
        principal: Principal | None = None,
        scope: TaskScope | None = None,
    ) -> Outcome:
        """Run ``call`` for ``task_id`` unless the ledger says it ran, runs, or may not.

        ``principal`` (who the agent acts for) and ``scope`` (what the task may touch)
        default to the gate's; they are bound to the task the first time they are
        given, and a different one later is a ``TaskContextConflict``.
        """
        ctx = self._context(principal, scope)
        return self._serve_sync(self._drive_call(task_id, _as_call(call), None, ctx))

    async def aexecute(
        self,
        task_id: str,
        call: ToolCall | Mapping[str, Any],
        *,
        principal: Principal | None = None,
        scope: TaskScope | None = None,
    ) -> Outcome:
        """``execute`` for async code: database work off the loop, tools on it."""
        ctx = self._context(principal, scope)
        return await self._serve_async(self._drive_call(task_id, _as_call(call), None, ctx))

    def resume(self, task_id: str) -> list[Outcome]:
        """Carry a task as far as the ledger allows, each call at most once.

        Decides calls left ``received``, runs calls that are ``authorized``, runs
        approved calls (consuming their approval), sweeps calls whose worker died
        and settles or retries in-doubt calls as ``recover`` does. Calls that wait
        for a person stay as they are and are reported. Finished calls are skipped.
        Two processes resuming the same task at once run each call once between them.
        """
        return [
            self._serve_sync(self._drive_record(rec))
            for rec in self.ledger.calls(task_id)
            if rec.state not in TERMINAL
        ]

    def blockers(self, task_id: str) -> list[Blocker]:
        """What stands between the task and its completion, call by call."""
        out: list[Blocker] = []
        for rec in self.ledger.calls(task_id):
            if rec.state in (CallState.SUCCEEDED, CallState.FAILED, CallState.REJECTED):
                continue
            needs, reason = self._needs(rec)
            out.append(Blocker(rec.call_id, rec.tool, rec.state, needs, reason))
        return out

    def _needs(self, rec: CallRecord) -> tuple[str, str | None]:
        if rec.state is CallState.AWAITING_APPROVAL:
            last = self.ledger.approval(rec)
            if last is None:
                return "approval", rec.reason
            args, why = self._arguments(rec)
            problem = why or approvals.problem(
                last,
                args_hash=self._hash_for(rec, args) if args is not None else "",
                stored_args_hash=rec.args_hash,
                policy_hash=self.rules.hash if self.rules else None,
            )
            problem = problem or self._approver_refusal(rec, last.decided_by)
            if problem is None:
                return "run", f"approved by {last.decided_by}; the next resume runs it"
            return "approval", problem
        if rec.state is CallState.IN_DOUBT:
            return "resolution", rec.reason
        if rec.state is CallState.EXECUTING:
            alive, _ = self._lease_alive(rec)
            if alive:
                return "nothing", f"running under {rec.lease_owner} (attempt {rec.attempt})"
            return "resolution", "its worker is gone; the next resume marks it in doubt"
        if rec.state is CallState.INCOMPLETE:
            return "none", rec.reason
        return "run", rec.reason or "the next resume decides or runs it"

    def approve(
        self,
        call: str | Outcome,
        *,
        by: str,
        reason: str | None = None,
        task_id: str | None = None,
        ttl: float | None = DEFAULT_APPROVAL_TTL,
    ) -> tuple[ApprovalRecord, bool]:
        """A person approves a call that waits for approval; returns it and whether new.

        The approval is bound to the call's argument hash, to a policy hash and to an
        expiry ``ttl`` seconds from now (None: no expiry). The policy hash is the one
        of the policy that asked for the approval; a gate running another policy
        first re-evaluates the call under its own policy and binds the approval to
        that one (``ApprovalRefused`` if that policy denies the call). The call runs
        when a gate with that same policy next sees it (``resume``, ``execute``).
        """
        if not by or not by.strip():
            raise GateUsageError("an approval names who gives it (by=)")
        why = approvals.ttl_problem(ttl)
        if why is not None:
            raise GateUsageError(f"ttl: {why} (or None: no expiry)")
        rec = self._find_one(call, task_id)
        refusal = self._approver_refusal(rec, by.strip())
        if refusal is not None:
            self.ledger.note(
                rec,
                "approval_refused",
                actor=f"operator:{by.strip()}",
                detail={"reason": refusal, "policy_hash": self.rules.hash if self.rules else None},
            )
            raise ApprovalRefused(refusal)
        policy_hash: str | None = None
        if self.rules is not None and rec.policy_hash != self.rules.hash:
            if rec.state is not CallState.AWAITING_APPROVAL:
                raise NotAwaitingApproval(
                    f"call {rec.call_id!r} of task {rec.task_id!r} is {rec.state.value}, "
                    "not awaiting approval"
                )
            decision = self._evaluate_now(rec)
            if decision.effect is DecisionEffect.DENY:
                raise ApprovalRefused(
                    f"policy {self.rules.hash} denies call {rec.call_id!r} "
                    f"({', '.join(decision.rule_ids)}); deny it instead"
                )
            policy_hash = self.rules.hash
        return self.ledger.approve(
            rec, by=by.strip(), reason=reason, policy_hash=policy_hash,
            ttl_ms=int(ttl * 1000) if ttl is not None else None,  # from the database's clock
        )

    def deny(
        self,
        call: str | Outcome,
        *,
        by: str,
        reason: str | None = None,
        task_id: str | None = None,
    ) -> Outcome:
        """A person denies a call that waits for approval: it is rejected, never run."""
        if not by or not by.strip():
            raise GateUsageError("a denial names who gives it (by=)")
        rec = self._find_one(call, task_id)
        tr = self.ledger.deny(rec, by=by.strip(), reason=reason)
        return self._outcome(tr.record, replayed=False)

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
        rec = self._find_one(call if not isinstance(call, ToolCall) else call.call_id, task_id)
        try:
            verdict = Reconciliation(str(getattr(as_, "value", as_)).replace("-", "_"))
        except ValueError:
            raise GateUsageError(
                f"as_ must be one of {', '.join(r.value for r in Reconciliation)}"
            ) from None
        actor = f"operator:{by}" if by else "operator"
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

    def _approver_refusal(
        self, rec: CallRecord, approver: str, txn: LedgerTxn | None = None
    ) -> str | None:
        """Why this gate's policy does not let ``approver`` approve ``rec`` (None: it
        does, or there is no policy file to say)."""
        if self.rules is None:
            return None
        if txn is not None:
            principal, _ = self._task_context(txn, rec.task_id)
            principal_id = principal.id
        else:
            task = self.ledger.task(rec.task_id)
            principal_id = principal_from_json(task.principal if task else None).id
        return self.rules.policy.approval_refusal(rec.tool, approver, principal_id)

    def _find_one(self, call: str | Outcome, task_id: str | None) -> CallRecord:
        call_id = call if isinstance(call, str) else call.call_id
        if task_id is None and isinstance(call, Outcome):
            task_id = call.task_id
        recs = self.ledger.find(call_id, task_id)
        if not recs:
            where = f" in task {task_id!r}" if task_id is not None else ""
            raise GateUsageError(f"no call {call_id!r}{where} in the ledger")
        if len(recs) > 1:
            raise AmbiguousCall(f"call id {call_id!r} exists in {len(recs)} tasks; pass task_id")
        return recs[0]

    def calls(self, task_id: str) -> list[Outcome]:
        """Every recorded call of a task, as stored (``replayed=True``)."""
        return [self._outcome(r, replayed=True) for r in self.ledger.calls(task_id)]

    # ------------------------------------------------------------- pipeline

    def dispatch_mode(self, tool_name: str) -> DispatchMode:
        """When a call may run: reads as soon as complete, writes after the response."""
        tool = self.tools.get(tool_name)
        if tool is None or self._policy_defers(tool_name):
            return DispatchMode.ON_RESPONSE_COMPLETE
        if tool.spec.dispatch is not None:
            return DispatchMode(tool.spec.dispatch)
        if self._classes(tool)[0] is Effect.READ:
            return DispatchMode.ON_CALL_COMPLETE
        return DispatchMode.ON_RESPONSE_COMPLETE

    def _policy_defers(self, tool_name: str) -> bool:
        """The policy file classes the tool a write or destructive: it runs only after
        the response completed, whatever the code or the caller asked for."""
        if self.rules is None:
            return False
        tool = self.tools.get(tool_name)
        return tool is not None and self._classes(tool)[0] is not Effect.READ

    def run(
        self,
        events: Iterable[object],
        *,
        task_id: str,
        provider: str,
        dispatch: Callable[[str], DispatchMode] | DispatchMode | None = None,
        accumulator: Accumulator | DetectingAccumulator | None = None,
        principal: Principal | None = None,
        scope: TaskScope | None = None,
    ) -> RunResult:
        """Drive a response's events through accumulator and gate, calls as they complete.

        ``events`` are SSE events (``ServerSentEvent``), mappings or SDK event
        objects of ``provider``'s protocol. A write whose response then ended
        without success is recorded ``incomplete`` and not run. If the event source
        raises, held calls are still recorded as not run before the error propagates.
        Pass ``accumulator`` (see ``accumulator_for``) when the source reconnects, so
        that the transport can tell it a new connection began (``reconnected()``)
        and events the server replays are recognised as such. ``principal`` and
        ``scope`` as for ``execute``.
        """
        ctx = self._context(principal, scope)
        acc = accumulator or self.accumulator_for(provider, dispatch)
        outcomes: list[Outcome] = []
        error: str | None = None
        source = iter(events)
        held = _Held(self._mode_fn(dispatch))
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
                for call in held.due(released, acc.terminal):
                    outcomes.extend(self._released(task_id, call, acc.terminal, dispatch, ctx))
        finally:
            closing, error = _closed(acc, error)
            for call in held.due(closing, acc.terminal, final=True):
                outcomes.extend(self._released(task_id, call, acc.terminal, dispatch, ctx))
            self._after_run(task_id, acc)
        return RunResult(tuple(outcomes), acc.terminal, error, acc.anomalies, acc.provider)

    async def arun(
        self,
        events: AsyncIterable[object] | Iterable[object],
        *,
        task_id: str,
        provider: str,
        dispatch: Callable[[str], DispatchMode] | DispatchMode | None = None,
        accumulator: Accumulator | DetectingAccumulator | None = None,
        principal: Principal | None = None,
        scope: TaskScope | None = None,
    ) -> RunResult:
        """``run`` for async event sources and async tools."""
        ctx = self._context(principal, scope)
        acc = accumulator or self.accumulator_for(provider, dispatch)
        outcomes: list[Outcome] = []
        error: str | None = None
        held = _Held(self._mode_fn(dispatch))

        async def handle(calls: list[ToolCall], final: bool = False) -> None:
            for call in held.due(calls, acc.terminal, final=final):
                gen = self._released_driver(task_id, call, acc.terminal, dispatch, ctx)
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
            closing, error = _closed(acc, error)
            await handle(closing, final=True)
            await asyncio.to_thread(self._after_run, task_id, acc)
        return RunResult(tuple(outcomes), acc.terminal, error, acc.anomalies, acc.provider)

    def accumulator_for(
        self,
        provider: str,
        dispatch: Callable[[str], DispatchMode] | DispatchMode | None = None,
    ) -> Accumulator | DetectingAccumulator:
        """The accumulator ``run`` would use, for a caller that must hold it
        (``provider="auto"``: one that tells the protocol from the first events)."""
        return accumulator(provider, dispatch=self._mode_fn(dispatch))

    def _mode_fn(
        self, dispatch: Callable[[str], DispatchMode] | DispatchMode | None
    ) -> Callable[[str], DispatchMode]:
        if dispatch is None:
            return self.dispatch_mode
        chosen: Callable[[str], DispatchMode] = (
            (lambda _name: dispatch) if isinstance(dispatch, DispatchMode) else dispatch
        )

        def mode(tool_name: str) -> DispatchMode:
            if self._policy_defers(tool_name):
                return DispatchMode.ON_RESPONSE_COMPLETE
            return chosen(tool_name)

        return mode

    def _released_driver(
        self,
        task_id: str,
        call: ToolCall,
        terminal: Terminal | None,
        dispatch: Callable[[str], DispatchMode] | DispatchMode | None,
        ctx: _Context | None = None,
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
        return self._drive_call(task_id, call, early, ctx or self._context(None, None))

    def _released(
        self,
        task_id: str,
        call: ToolCall,
        terminal: Terminal | None,
        dispatch: Callable[[str], DispatchMode] | DispatchMode | None,
        ctx: _Context | None = None,
    ) -> list[Outcome]:
        gen = self._released_driver(task_id, call, terminal, dispatch, ctx)
        return [] if gen is None else [self._serve_sync(gen)]

    def _after_run(self, task_id: str, acc: Accumulator | DetectingAccumulator) -> None:
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
        self,
        task_id: str,
        call: ToolCall,
        early: tuple[Event, str, str] | None,
        ctx: _Context | None = None,
    ) -> _Driver:
        """Record an incoming call (or find it), then drive its row."""
        if call.status is CallStatus.PROVIDER_EXECUTED:
            raise GateUsageError(
                f"call {call.call_id!r} was executed by the provider; the gate does not run it"
            )
        _check_task_id(task_id)
        asked_id = call.call_id  # what the agent answers the model with
        call, unstorable = _storable_identifiers(call)
        tool = self.tools.get(call.name)
        arguments, pre = self._classify(call, tool)
        if early is None:
            early = unstorable or pre
        # For a tool the policy redacts fields of, the row holds the redacted form, the
        # whole object is sealed, and every hash of argument content (argument hash,
        # dedupe key) is keyed (see ledger.seal). This depends on the tool, not on
        # whether this call carried a redacted field, so that two calls of one tool are
        # always hashed alike and a dedupe key still catches a repeated write.
        key_for: sealing.SealKey | None = None
        stored = arguments
        if arguments is not None and self.rules is not None and self.rules.redacts(call.name):
            key_for = self._sealing_key()
            stored = self.rules.redact(call.name, arguments, key=key_for.digest_key) or arguments

        def content_hash(value: Any) -> str:
            text = canonical_json(value)
            return key_for.keyed_hash(text) if key_for is not None else sha256_hex(text)

        key = f"call:{call.call_id}"
        if tool is not None and arguments is not None and early is None:
            values = tool.dedupe_values(arguments)
            if values is not None:
                key = f"dedupe:{call.name}:{content_hash(values)}"
        if key_for is not None:
            args_hash = content_hash(arguments)
            sealed: str | None = key_for.seal(
                canonical_json(arguments), bound_to=_seal_binding(task_id, call.call_id, args_hash)
            )
        else:
            args_hash = _hash_of(
                arguments if arguments is not None else call.arguments, call.raw_arguments
            )
            if arguments is None and self.rules is not None and self.rules.redacts_anything:
                # Rejected before any field could be redacted (an unknown tool, not an
                # object): its text may hold a secret that a plain SHA-256 would let
                # anyone with the ledger confirm by guessing. Keep a keyed digest of it.
                args_hash = self._sealing_key().keyed_hash(args_hash)
            sealed = None
        effect, idempotency = self._classes(tool) if tool is not None else (None, None)
        ctx = ctx or self._context(None, None)
        failed: list[BaseException] = []

        def decide(conn: Any, new: CallRecord) -> Ruling | None:
            # Deciding a call that was just inserted commits with the insert (one
            # commit fewer per call). If deciding fails, the row still commits as
            # ``received`` (as when it was two transactions) and the error is raised
            # after that commit: nothing recorded is lost. A database error is raised
            # at once: the transaction cannot commit anything after it.
            try:
                return self._ruling(conn, new, early)
            except SQLAlchemyError:
                raise
            except Exception as exc:
                failed.append(exc)
                return None

        rec, inserted = self.ledger.record(
            NewCall(
                task_id=task_id,
                call_id=call.call_id,
                idem_key=key,
                tool=call.name,
                effect=effect.value if effect else "unknown",
                idempotency=idempotency.value if idempotency else "unknown",
                args_hash=args_hash,
                arguments=stored,
                sealed_arguments=sealed,
                principal=ctx.principal,
                scope=ctx.scope,
            ),
            provider=call.provider,
            actor=self.owner,
            # A custom Authorizer may call out (a network service): it decides in a
            # transaction of its own, never while this one holds the write lock.
            decide=decide if self.policy is None or self.rules is not None else None,
            lock=self.rules is not None,
        )
        if failed:
            raise failed[0]
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
                call_id=asked_id,
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
            rec,
            early=early,
            call_id=asked_id,
            duplicate_of=duplicate_of,
            acted=inserted and rec.state is not CallState.RECEIVED,
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
            code = {
                "arguments_not_object": R.ARGUMENTS_NOT_OBJECT,
                ArgumentsTooDeep.reason: R.ARGUMENTS_TOO_DEEP,
            }.get(why, R.STREAM_REJECTED)
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
            raw = call.raw_arguments or ""
            try:
                # As strict as the accumulator: text handed in directly must not
                # pass with duplicate keys (which member would the tool see?), NaN
                # or lone surrogates that a stream would have been rejected for.
                arguments = strict_arguments(raw)
            except StrictParseError as exc:
                if exc.reason == ArgumentsTooDeep.reason:
                    return None, (
                        Event.REJECT,
                        R.ARGUMENTS_TOO_DEEP,
                        f"the arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels; not run",
                    )
                if exc.reason != "arguments_not_object":
                    why = "" if exc.reason == "invalid_json" else f" ({exc.reason})"
                    return None, (
                        Event.REJECT,
                        R.ARGUMENTS_NOT_OBJECT,
                        f"the arguments are not valid JSON{why}; not run",
                    )
                arguments = json.loads(raw)  # valid JSON, not an object: named below
        if not isinstance(arguments, Mapping):
            return None, (
                Event.REJECT,
                R.ARGUMENTS_NOT_OBJECT,
                f"the arguments are a JSON {json_type_name(arguments)}, not an object; not run",
            )
        try:
            # Handed in as an object, never parsed: bounded here as text is at parsing.
            check_depth(arguments)
        except ArgumentsTooDeep as exc:
            return None, (
                Event.REJECT,
                R.ARGUMENTS_TOO_DEEP,
                f"the arguments nest deeper than {exc.limit} levels; not run",
            )
        try:
            # Encoded as the ledger will store it: a lone surrogate passes json.dumps
            # but no database column takes it.
            canonical_json(arguments).encode("utf-8")
        except UnicodeEncodeError:
            return None, (
                Event.REJECT,
                R.ARGUMENTS_NOT_JSON,
                "the arguments hold a lone surrogate (not valid Unicode text); not run",
            )
        except (TypeError, ValueError):
            return None, (
                Event.REJECT,
                R.ARGUMENTS_NOT_JSON,
                "the arguments are not JSON data (NaN, Infinity, non-string keys "
                "or other objects); not run",
            )
        if tool.spec.model is None:
            return dict(arguments), None
        # A tool declared with a pydantic model receives the model's coerced value
        # (``Path`` normalized, strings stripped, defaults filled in). The policy must
        # judge, the ledger hash and the tool receive one value, so the call is
        # coerced here and everything after this point sees that value.
        try:
            return tool.judged(arguments), None
        except ArgumentsInvalid as exc:
            if any(e.keyword == COERCION_UNSTABLE for e in exc.errors):
                return None, (
                    Event.REJECT,
                    R.SCHEMA_INVALID,
                    f"the model of {call.name!r} changes its own output when validated "
                    "again, so no single value can be judged and handed over; not run",
                )
            return dict(arguments), None  # _decide rejects it, naming the failed fields
        except Exception:
            # A bug in the tool's own validators: the call is recorded as it came and
            # ``_decide`` raises the error after the row committed (nothing is lost).
            return dict(arguments), None

    def _advance(
        self,
        rec: CallRecord,
        *,
        early: tuple[Event, str, str] | None,
        call_id: str,
        duplicate_of: str | None,
        acted: bool = False,
    ) -> _Driver:
        """Move the row forward from whatever state it is in, one CAS at a time.

        ``acted``: this invocation already moved the row (decided it as it recorded it).
        """
        # ``replayed`` is False only when this invocation made the transition that
        # produced the state it reports: losing a race to another worker, or finding the
        # row already there, means the outcome was read, not produced.
        extra: dict[str, Any] = {"call_id": call_id, "duplicate_of": duplicate_of}
        # ``fresh``: the version at which this invocation itself authorized the row,
        # under this gate's policy, from arguments it holds: a claim of exactly that
        # version need not re-check it. Any later arrow bumps the version.
        fresh = rec.version if acted and rec.state is CallState.AUTHORIZED else None
        for _ in range(_MAX_DRIVER_STEPS):
            state = rec.state
            if state is CallState.RECEIVED:
                decided = self._decide(rec, early)
                if decided is _ASK_POLICY:
                    tr, _ = self.ledger.authorize(rec, self._policy_ruling, actor=self.owner)
                elif isinstance(decided, str):
                    # Cannot be decided here (sealed arguments without the key): report.
                    return self._outcome(
                        rec,
                        replayed=not acted,
                        code=R.ARGUMENTS_SEALED,
                        reason=decided,
                        state=rec.state,
                        **extra,
                    )
                else:
                    ruling = _ruling_of(decided)
                    tr = self.ledger.transition(
                        rec,
                        ruling.event,
                        actor=self.owner,
                        code=ruling.code,
                        reason=ruling.reason,
                        detail=ruling.detail,
                        changes=ruling.changes,
                    )
                rec, acted = tr.record, tr.won
                fresh = rec.version if acted and rec.state is CallState.AUTHORIZED else None
                continue
            if state is CallState.AWAITING_APPROVAL:
                approved = self._claim_approved(rec, call_id, duplicate_of)
                if isinstance(approved, _Claimed):
                    ran = yield _Run(approved)
                    return self._finish(approved, ran)
                now, waiting, won = approved
                if now.state is CallState.AWAITING_APPROVAL:
                    return self._outcome(
                        now,
                        replayed=not acted,
                        state=now.state,
                        code=R.AWAITING_APPROVAL,
                        reason=waiting or now.reason,
                        **extra,
                    )
                rec, acted = now, won
                continue
            if state is CallState.AUTHORIZED:
                claimed = self._claim(rec, call_id, duplicate_of, recheck=rec.version != fresh)
                if isinstance(claimed, Transition):
                    if claimed.record.version == rec.version:
                        # Cannot run here (tool missing or invalid now, or its state is
                        # not what its audit trail recorded): report, leave it.
                        return self._outcome(claimed.record, replayed=not acted, **extra)
                    # Lost the claim to someone else, or the re-check moved the call.
                    rec, acted = claimed.record, claimed.won
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

    def _ruling(
        self, conn: Any, rec: CallRecord, early: tuple[Event, str, str] | None
    ) -> Ruling | None:
        """The decision for a ``received`` row inside a ledger transaction; None when
        it cannot be decided in this process (it stays ``received``)."""
        decided = self._decide(rec, early)
        if decided is _ASK_POLICY:
            return self._policy_ruling(conn, rec)
        if isinstance(decided, str):
            return None
        return _ruling_of(decided)  # type: ignore[arg-type]

    def _decide(
        self, rec: CallRecord, early: tuple[Event, str, str] | None
    ) -> tuple[Event, str, str | None, dict[str, Any] | None] | str | object:
        """Validation and authorization of a ``received`` call: which arrow to take.

        ``_ASK_POLICY`` when a policy file decides (in the ledger transaction); a
        string when the call cannot be decided in this process (why).
        """
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
        arguments, why = self._arguments(rec)
        if why is not None:
            return why
        if arguments is None:
            return (
                Event.REJECT,
                R.ARGUMENTS_NOT_OBJECT,
                "the arguments are not a JSON object; not run",
                None,
            )
        try:
            judged = tool.judged(arguments)
        except ArgumentsInvalid as exc:
            errors = [{"pointer": e.pointer, "keyword": e.keyword} for e in exc.errors[:20]]
            listed = "; ".join(str(e) for e in exc.errors[:10])
            return (
                Event.REJECT,
                R.SCHEMA_INVALID,
                f"the arguments fail the schema of {rec.tool!r} at {listed}; not run",
                {"errors": errors},
            )
        if judged != arguments:
            # Stored in a spelling the tool's model would change (recorded before its
            # validators worked): the policy would judge one value, the tool get another.
            return (
                Event.REJECT,
                R.SCHEMA_INVALID,
                f"the stored arguments of {rec.tool!r} are not the value its model hands "
                "the tool; not run",
                None,
            )
        if self.policy is None:
            return Event.ALLOW, R.ALLOWED, None, None
        if self.rules is not None:
            return _ASK_POLICY
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
        arguments, _ = self._arguments(rec)
        return CallInfo(
            task_id=rec.task_id,
            call_id=rec.call_id,
            tool=rec.tool,
            arguments=arguments,
            idempotency_key=_stable_key(rec.task_id, rec.idem_key),
            attempt=rec.attempt,
        )

    def _runnable(self, rec: CallRecord) -> tuple[Tool, Mapping[str, Any] | BaseModel] | str:
        """The tool and its validated input for a stored call, or why it cannot run here."""
        tool = self.tools.get(rec.tool)
        if tool is None:
            return f"tool {rec.tool!r} is not registered in this process"
        arguments, why = self._arguments(rec)
        if why is not None:
            return why
        try:
            return tool, tool.handed(arguments)
        except (ArgumentsInvalid, ArgumentsNotObject) as exc:
            return f"stored arguments no longer pass the schema ({exc})"

    def _claim(
        self, rec: CallRecord, call_id: str, duplicate_of: str | None, *, recheck: bool
    ) -> _Claimed | Transition:
        """Commit ``executing`` for an authorized call, or say why not (the row as is).

        ``recheck``: the call was authorized by someone else, earlier, or under
        another policy (a resume, a replay, a retry): the claim re-checks the stored
        arguments against ``args_hash`` and the policy of this gate, and rejects the
        call (or sends it to a person) instead of running it when either fails.
        """
        intact = self._args_intact(rec) if recheck else True
        runnable = self._runnable(rec)
        if isinstance(runnable, str):
            if intact is not False:
                return Transition(False, rec)
        elif runnable[0].is_async and _loop_running():
            raise GateUsageError(
                f"tool {runnable[0].name!r} is async and an event loop is running: use aexecute"
            )
        if recheck:
            verdict = None if self.rules is not None else self._verdict_outside(rec)
            tr, _ = self.ledger.claim_rechecked(
                rec,
                owner=self.owner,
                lease_ms=self.lease_ms,
                decide=lambda conn, current: self._recheck(conn, current, verdict),
            )
        else:
            # This invocation committed this very version: nothing to re-check.
            tr = self.ledger.claim(
                rec, owner=self.owner, lease_ms=self.lease_ms, trail_checked=False
            )
        if not tr.won or tr.record.state is not CallState.EXECUTING:
            return tr
        assert not isinstance(runnable, str)  # an intact, runnable call was claimed
        tool, validated = runnable
        return _Claimed(tr.record, tool, validated, self._info(tr.record), call_id, duplicate_of)

    def _args_intact(self, rec: CallRecord) -> bool | None:
        """Do the stored arguments still hash to ``args_hash``? None: cannot tell here
        (sealed, and this process has no key)."""
        if rec.sealed_arguments is None:
            return rec.arguments is not None and arguments_hash(rec.arguments) == rec.args_hash
        if self.seal_key is None:
            return None
        arguments, why = self._arguments(rec)
        return why is None and arguments is not None

    def _verdict_outside(self, rec: CallRecord) -> tuple[Event, str, str | None, Any] | None:
        """A custom Authorizer's answer for a re-checked claim (asked outside any
        transaction, as for a new call); None for a gate without a policy."""
        if self.policy is None:
            return None
        decided = self._decide(rec, None)
        return decided if isinstance(decided, tuple) else None

    def _recheck(
        self,
        conn: Any,
        current: CallRecord,
        outside: tuple[Event, str, str | None, Any] | None,
    ) -> Ruling:
        """The ruling of a re-checked claim, inside its transaction (task locked)."""
        if self._args_intact(current) is False:
            return Ruling(
                Event.REJECT,
                R.ARGUMENTS_CHANGED,
                "the stored arguments no longer hash to the ones decided "
                f"(sha256 {current.args_hash[:12]}): changed after the decision; not run",
            )
        if outside is not None:
            event, code, reason, detail = outside
            if event is Event.ALLOW:
                return Ruling(Event.CLAIM, changes=_ruling_of(outside).changes)
            return Ruling(event, code, f"re-checked when claimed: {reason}", detail)
        if self.rules is None:
            return Ruling(Event.CLAIM)
        return self._policy_ruling(conn, current, recheck=True)

    # ------------------------------------------------------------ policy

    def _context(self, principal: Principal | None, scope: TaskScope | None) -> _Context:
        return _Context(
            principal_json(principal or self.principal), scope_json(scope or self.scope)
        )

    def _classes(self, tool: Tool) -> tuple[Effect, Idempotency]:
        """The tool's effect and idempotency after the policy's (safer-only) overrides."""
        if self.rules is None:
            return tool.spec.effect, tool.spec.idempotency
        eff = self.rules.effective(tool.spec)
        return Effect(eff.effect.value), Idempotency(eff.idempotency.value)

    def _sealing_key(self) -> sealing.SealKey:
        if self.seal_key is None:
            self.seal_key = sealing.resolve(self._seal_source, self.ledger.url, create=True)
        if self.seal_key is None:  # pragma: no cover - __init__ refuses this configuration
            raise sealing.SealKeyMissing("redacted fields must be sealed and no key is configured")
        return self.seal_key

    def _arguments(self, rec: CallRecord) -> tuple[dict[str, Any] | None, str | None]:
        """The call's real arguments (unsealed when sealed), or why they are not at hand."""
        if rec.sealed_arguments is None:
            return rec.arguments, None
        if self.seal_key is None:
            return None, (
                f"call {rec.call_id!r} has sealed arguments and this process has no seal key "
                f"(${sealing.ENV_KEY} or ${sealing.ENV_KEY_FILE})"
            )
        try:
            text = self.seal_key.open(
                rec.sealed_arguments,
                bound_to=_seal_binding(rec.task_id, rec.call_id, rec.args_hash),
            )
        except sealing.SealError as exc:
            return None, f"the sealed arguments of call {rec.call_id!r} cannot be opened: {exc}"
        value = json.loads(text)
        if not isinstance(value, dict) or self.seal_key.keyed_hash(text) != rec.args_hash:
            return None, f"the sealed arguments of call {rec.call_id!r} do not match its hash"
        return value, None

    def _hash_for(self, rec: CallRecord, arguments: Mapping[str, Any]) -> str:
        """The argument hash ``arguments`` would have in ``rec``'s row."""
        text = canonical_json(dict(arguments))
        if rec.sealed_arguments is not None and self.seal_key is not None:
            return self.seal_key.keyed_hash(text)
        return sha256_hex(text)

    def _task_context(self, txn: LedgerTxn, task_id: str) -> tuple[Principal, TaskScope]:
        principal_text, scope_text = txn.task_context(task_id)
        return principal_from_json(principal_text), scope_from_json(task_id, scope_text)

    def _evaluate_in(
        self,
        txn: LedgerTxn,
        rec: CallRecord,
        arguments: Mapping[str, Any],
        *,
        besides: int | None = None,
    ) -> PolicyDecision:
        """The policy's decision for ``rec`` with the task's bound context and usage now
        (``besides``: without that call row's own charges)."""
        assert self.rules is not None
        principal, scope = self._task_context(txn, rec.task_id)
        usage = txn.usage(rec.task_id, self.rules.counters(rec.tool), besides=besides)
        return self.rules.evaluate(
            rec.tool, arguments, principal=principal, scope=scope, usage=usage
        )

    def _evaluate_now(self, rec: CallRecord) -> PolicyDecision:
        arguments, why = self._arguments(rec)
        if arguments is None:
            raise GateUsageError(why or f"call {rec.call_id!r} has no argument object")
        with self.ledger.reading() as txn:
            return self._evaluate_in(txn, rec, arguments)

    def _policy_ruling(self, conn: Any, rec: CallRecord, *, recheck: bool = False) -> Ruling:
        """The policy's ruling inside the ledger transaction that applies it: for a
        ``received`` call (``Ledger.authorize``), or, with ``recheck``, for an
        authorized call being claimed (``Ledger.claim_rechecked``: allowed means
        CLAIM, and the call's own charges do not count against it)."""
        assert self.rules is not None
        arguments, _ = self._arguments(rec)
        assert arguments is not None  # _decide / the claim's hash check saw them
        decision = self._evaluate_in(
            conn, rec, arguments, besides=rec.row_id if recheck else None
        )
        detail, changes, reason = _decision_record(decision)
        when = " when claimed" if recheck else ""
        if decision.effect is DecisionEffect.ALLOW:
            if recheck:
                return Ruling(Event.CLAIM, detail=detail, changes=changes)
            return Ruling(
                Event.ALLOW,
                R.ALLOWED,
                reason,
                detail,
                charges=self.rules.charges(rec.tool, arguments),
                changes=changes,
            )
        if decision.effect is DecisionEffect.APPROVE:
            return Ruling(
                Event.REQUIRE_APPROVAL,
                R.AWAITING_APPROVAL,
                f"waits for a human approval{when}: {reason}",
                detail,
                changes=changes,
            )
        return Ruling(
            Event.REJECT,
            R.POLICY_DENIED,
            f"denied by policy{when}: {reason}; not run",
            detail,
            changes=changes,
        )

    def _claim_approved(
        self, rec: CallRecord, call_id: str, duplicate_of: str | None
    ) -> _Claimed | tuple[CallRecord, str | None, bool]:
        """Use the call's approval and commit ``executing``, or say why it waits."""
        if self.rules is None:
            return rec, None, False
        last = self.ledger.approval(rec)
        if last is None:
            return rec, None, False  # nobody answered yet: the policy's reason stands
        runnable = self._runnable(rec)
        if isinstance(runnable, str):
            return rec, f"approved, but it cannot run here: {runnable}", False
        tool, validated = runnable
        if tool.is_async and _loop_running():
            raise GateUsageError(
                f"tool {tool.name!r} is async and an event loop is running: use aexecute"
            )
        arguments, _ = self._arguments(rec)
        assert arguments is not None
        rules = self.rules

        def decide(txn: LedgerTxn, current: CallRecord) -> Ruling:
            approval = txn.latest_approval(current.row_id)
            problem = approvals.problem(
                approval,
                args_hash=self._hash_for(current, arguments),
                stored_args_hash=current.args_hash,
                policy_hash=rules.hash,
            )
            if problem is not None or approval is None:
                return Ruling(None, reason=problem)
            refusal = self._approver_refusal(current, approval.decided_by, txn)
            if refusal is not None:
                refused.append(refusal)
                return Ruling(
                    None, reason=f"approved, but {refusal}; a permitted approver must approve it"
                )
            decision = self._evaluate_in(txn, current, arguments)
            detail, changes, reason = _decision_record(decision)
            if decision.effect is DecisionEffect.DENY:
                return Ruling(
                    Event.DENY,
                    R.POLICY_DENIED,
                    f"denied by policy when its approval was used: {reason}; not run",
                    detail,
                    changes=changes,
                )
            return Ruling(
                Event.APPROVE,
                R.APPROVED,
                f"approved by {approval.decided_by}"
                + (f": {bound(approval.reason, 200)}" if approval.reason else ""),
                {**detail, "approved_by": approval.decided_by},
                charges=rules.charges(current.tool, arguments),
                approval_id=approval.id,
            )

        refused: list[str] = []
        tr, ruling = self.ledger.claim_approved(
            rec, owner=self.owner, lease_ms=self.lease_ms, decide=decide
        )
        if refused:
            self.ledger.note(
                tr.record,
                "approval_refused",
                actor=self.owner,
                detail={"reason": refused[0], "approved_by": last.decided_by,
                        "policy_hash": rules.hash},
            )
        if tr.won and tr.record.state is CallState.EXECUTING:
            return _Claimed(
                tr.record, tool, validated, self._info(tr.record), call_id, duplicate_of
            )
        waiting = ruling.reason if ruling is not None and ruling.event is None else None
        return tr.record, waiting, tr.won

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
                    result=self._kept(rec, verdict.result).stored,
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
                        "message": self._cleaned(rec, verdict.error or "failed downstream"),
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
        return self._leases.hold(claimed.rec)

    def _renew(self, rec: CallRecord) -> bool:
        return self.ledger.renew(rec, owner=self.owner, lease_ms=self.lease_ms)

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
            scrub = self._outcome_scrub(claimed.rec.tool, claimed.info.arguments)
            kept = keep_result(ran.value, self.max_result_bytes, scrub)
            value = kept.value
            tr = self.ledger.finish(
                rec,
                Event.SUCCEED,
                actor=owner,
                lease_owner=owner,
                result=kept.stored,
                code=kept.code,
                reason=kept.reason,
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
        args = claimed.info.arguments
        scrub = self._outcome_scrub(claimed.rec.tool, claimed.info.arguments)
        secrets = scrub.secrets if scrub is not None else None
        error = describe_error(ran.exc, args, secrets) if ran.exc is not None else None
        timeout = claimed.tool.spec.timeout
        if ran.kind == "error":
            kind = error["type"] if error else "an error"
            return Event.FAIL, R.TOOL_ERROR, f"the tool raised {kind}", error
        if ran.kind == "timeout":
            if self._classes(claimed.tool)[0] is Effect.READ:
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
        scrub = self._outcome_scrub(claimed.rec.tool, claimed.info.arguments)
        if ran.kind == "ok":
            kept = keep_result(ran.value, self.max_result_bytes, scrub)
            tr = self.ledger.finish(
                current,
                Event.SETTLE_SUCCEEDED,
                actor=self.owner,
                code=R.LATE_OUTCOME,
                reason="the tool returned after its call was judged in doubt"
                + ("; its result has no JSON form, only its type and size are kept"
                   if kept.code else ""),
                result=kept.stored,
            )
        elif ran.kind == "error":
            secrets = scrub.secrets if scrub is not None else None
            tr = self.ledger.finish(
                current,
                Event.SETTLE_FAILED,
                actor=self.owner,
                code=R.LATE_OUTCOME,
                reason="the tool raised after its call was judged in doubt",
                error=describe_error(ran.exc, claimed.info.arguments, secrets)
                if ran.exc
                else None,
            )
        else:
            return None
        return tr.record if tr.won else None

    def _kept(self, rec: CallRecord, result: Any) -> KeptResult:
        """A result reported for ``rec`` by someone other than its tool run (a reconcile
        hook), kept as a tool's own result is."""
        scrub = self._outcome_scrub(rec.tool, self._info(rec).arguments)
        return keep_result(result, self.max_result_bytes, scrub)

    def _cleaned(self, rec: CallRecord, message: object) -> str:
        """A message reported for ``rec`` (a reconcile hook's error), as it may be stored."""
        args = self._info(rec).arguments
        scrub = self._outcome_scrub(rec.tool, args)
        return clean_message(message, args, scrub.secrets if scrub else None, 300)

    def _outcome_scrub(
        self, tool: str, arguments: Mapping[str, Any] | None
    ) -> OutcomeScrub | None:
        """What the policy redacts of a call, to be kept out of its result and error."""
        if self.rules is None:
            return None
        policy = self.rules.policy
        return OutcomeScrub.build(
            arguments,
            policy.redaction_rules(tool),
            policy.result_redaction_rules(tool),
            key=self.seal_key.digest_key if self.seal_key is not None else None,
        )

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
            arguments=rec.arguments,
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


def _storable_identifiers(call: ToolCall) -> tuple[ToolCall, tuple[Event, str, str] | None]:
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
    return call, (
        Event.REJECT,
        R.IDENTIFIER_UNSTORABLE,
        f"the {' and the '.join(problems)}; recorded under a stand-in, not run",
    )


def _check_task_id(task_id: str) -> None:
    if not isinstance(task_id, str) or not task_id:
        raise GateUsageError("task_id must be a non-empty string")
    problem = _unstorable(task_id, ID_LEN)
    if problem is not None:
        raise GateUsageError(f"task_id {problem}; choose a shorter plain-text task id")


def _seal_binding(task_id: str, call_id: str, args_hash: str) -> str:
    """What a sealed argument blob is bound to: it opens only in its own row."""
    return f"{task_id}\x00{call_id}\x00{args_hash}"


def _decision_record(
    decision: PolicyDecision,
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """A policy decision as the ledger keeps it: audit detail, row columns, one reason.

    The reasons name fields and the policy's constraints, never argument values.
    """
    reason = bound("; ".join(decision.reasons) or decision.effect.value, 700)
    detail: dict[str, Any] = {
        "verdict": decision.effect.value,
        "rule_ids": list(decision.rule_ids),
        "policy_hash": decision.policy_hash,
        "reasons": [bound(r, 240) for r in decision.reasons[:3]],
    }
    exceeded = [c.id for c in decision.exceeded_limits]
    if exceeded:
        detail["exceeded_limits"] = exceeded
    changes = {"policy_hash": decision.policy_hash, "rule_ids": json.dumps(list(decision.rule_ids))}
    return detail, changes, reason


def _ruling_of(decided: tuple[Event, str, str | None, dict[str, Any] | None]) -> Ruling:
    """A decision taken outside the database (schema, custom Authorizer) as a Ruling."""
    event, code, reason, detail = decided
    changes: dict[str, Any] = {}
    if detail and "rule_ids" in detail:  # a custom Authorizer's decision
        changes = {
            "policy_hash": detail.get("policy_hash"),
            "rule_ids": json.dumps(detail["rule_ids"]),
        }
    return Ruling(event, code, reason, detail, changes=changes)
