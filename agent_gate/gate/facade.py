"""The ``Gate``: a complete tool call in, at most one execution, an outcome out.

This module holds the public methods only; each job lives in its own module:
``admission`` (the value judged and kept), ``decide`` (schema and policy into one
``Ruling``), ``driver`` (the per-state walk), ``finish`` (what is committed after
a run), ``runner`` (threads, asyncio, leases), ``stream`` (a response's events),
``outcome`` and ``render`` (what is reported, and in each provider's format).

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
import os
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any, TypedDict, Unpack

from agent_gate.accumulate import Accumulator, DispatchMode
from agent_gate.authorize import PolicyAuthorizer
from agent_gate.autodetect import DetectingAccumulator, accumulator
from agent_gate.calls import ToolCall
from agent_gate.errors import (
    AgentGateError,
    GateUsageError,
    NotInDoubt,
)
from agent_gate.gate import desk, waiting
from agent_gate.gate.admission import Arguments, CallContext, as_call
from agent_gate.gate.decide import Authorizer, Decider
from agent_gate.gate.driver import CallDriver, lease_end
from agent_gate.gate.finish import Finisher
from agent_gate.gate.mcp_approval import ApprovalTools
from agent_gate.gate.outcome import Blocker, Outcome, RunResult, outcome_of
from agent_gate.gate.runner import CallWalk, Runner
from agent_gate.gate.stream import StreamRun
from agent_gate.ledger.approvals import ApprovalRecord
from agent_gate.ledger.lease import this_owner
from agent_gate.ledger.reasons import ReasonCode as R
from agent_gate.ledger.records import CallRecord, Transition
from agent_gate.ledger.states import LEASE_ENDS, TERMINAL, CallState, LeaseEnd
from agent_gate.ledger.store import Ledger
from agent_gate.policy import Policy, Principal, TaskScope
from agent_gate.privacy import seal as sealing
from agent_gate.privacy.results import StoredResult, to_jsonable
from agent_gate.privacy.scrub import bound
from agent_gate.telemetry import Observer
from agent_gate.telemetry import observer as default_observer
from agent_gate.tools import Effect, Reconciliation, ToolRegistry

__all__ = [
    "DEFAULT_APPROVAL_TTL",
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_MAX_RESULT_BYTES",
    "CallOptions",
    "Gate",
    "RunOptions",
]

DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_APPROVAL_TTL = 24 * 3600.0
"""Seconds an approval stays usable unless the approver says otherwise."""
DEFAULT_MAX_RESULT_BYTES = 256 * 1024

Dispatch = Callable[[str], DispatchMode] | DispatchMode | None
AnyAccumulator = Accumulator | DetectingAccumulator
CallLike = ToolCall | Mapping[str, Any]


class CallOptions(TypedDict, total=False):
    """Who calls are made for, in ``execute``, ``run`` and their async twins.

    ``principal`` (who the agent acts for) and ``scope`` (what the task may touch)
    default to the gate's; they are bound to the task the first time they are given,
    and a different one later is a ``TaskContextConflict``.
    """

    principal: Principal | None
    scope: TaskScope | None


class RunOptions(CallOptions, total=False):
    """``CallOptions`` plus how ``run``/``arun`` read the stream.

    ``dispatch``: when a call may run (a ``DispatchMode`` or a function of the tool
    name; the policy's write class always wins). ``accumulator``: one the caller
    holds (see ``Gate.accumulator_for``), so that a reconnecting transport can tell
    it a new connection began and replayed events are recognised as such.
    """

    dispatch: Dispatch
    accumulator: AnyAccumulator | None
    on_text: Callable[[str], object] | None
    """Called with each fragment of the assistant's visible text as it arrives,
    before the response ends, so a UI streams the answer while the gate holds the
    calls. What it raises propagates from ``run`` (held calls are recorded as not
    run first)."""


def _checked(options: Mapping[str, Any], allowed: type, method: str) -> None:
    """Keyword options are a TypedDict: refuse a misspelled one as Python would."""
    unknown = sorted(set(options) - allowed.__optional_keys__)  # type: ignore[attr-defined]
    if unknown:
        raise TypeError(f"Gate.{method}() got an unexpected keyword argument {unknown[0]!r}")


class Gate:
    """Binds a ``ToolRegistry`` to a ledger and runs each complete call at most once.

    ``db`` is a database URL (default ``$AGENT_GATE_DB``, else
    ``sqlite:///agent_gate.db``) or an open ``Ledger``. ``policy`` decides
    allow/deny/approve per call: a policy file (a path, a ``Policy`` or a
    ``PolicyAuthorizer``: quotas, approvals bound to its hash, safer-only tool
    overrides, redaction) or a custom ``Authorizer``; without one every registered
    tool with valid arguments is allowed. ``principal`` and ``scope`` are the
    defaults for ``execute``/``run`` (bound to each task on first use).
    ``seal_key`` seals the fields the policy redacts (``agent_gate.privacy.seal``
    says where a key comes from otherwise). ``lease_seconds`` is how long a
    worker's claim on a running call lasts without renewal (it is renewed while the
    tool runs). ``telemetry`` is where traces, metrics and logs go
    (``agent_gate.telemetry``; default: OpenTelemetry when it is installed, else logs).
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
        telemetry: Observer | None = None,
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
        self.max_result_bytes = max_result_bytes
        self._owns_ledger = not isinstance(db, Ledger)
        self.ledger = (
            db if isinstance(db, Ledger)
            else Ledger(db, auto_upgrade=auto_upgrade, create=create)  # create: a new SQLite file
        )
        try:
            self._keys = Arguments(seal_key, self.ledger.url, self.rules)
        except BaseException:
            self.close()
            raise
        # Hosted MCP approval requests are looked up as tools that answer, never run
        # (``mcp_approval``); every other name is the caller's registry.
        self._tools = ApprovalTools(tools, decided=policy is not None)
        self._decider = Decider(self._tools, policy, self._keys, self.ledger)
        finisher = Finisher(self.ledger, self._decider, self._keys, max_result_bytes)
        self._finisher = finisher
        self.telemetry = telemetry or default_observer()
        """Traces, metrics and logs (``agent_gate.telemetry``); resolved once, here."""
        self._decider.observer = self.telemetry
        self._driver = CallDriver(
            self._tools, self.ledger, self._decider, self._keys, finisher, self.lease_ms,
            self.telemetry,
        )
        self._runner = Runner(self.ledger, self.lease_ms, finisher.finish)
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

    @property
    def seal_key(self) -> sealing.SealKey | None:
        """The key that seals redacted argument fields (None until one is needed)."""
        return self._keys.key

    def close(self) -> None:
        if self._owns_ledger:
            self.ledger.close()

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ one call

    def execute(self, task_id: str, call: CallLike, **options: Unpack[CallOptions]) -> Outcome:
        """Run ``call`` for ``task_id`` unless the ledger says it ran, runs, or may not
        (``options``: ``principal`` and ``scope``, see ``CallOptions``)."""
        _checked(options, CallOptions, "execute")
        return self._runner.serve_sync(self._drive(task_id, call, options))

    async def aexecute(
        self, task_id: str, call: CallLike, **options: Unpack[CallOptions]
    ) -> Outcome:
        """``execute`` for async code: database work off the loop, tools on it."""
        _checked(options, CallOptions, "aexecute")
        return await self._runner.serve_async(self._drive(task_id, call, options))

    def decide(self, task_id: str, call: CallLike, **options: Unpack[CallOptions]) -> Outcome:
        """Record ``call`` and take its decision without running it.

        For an agent framework that asks whether a call needs a person before it
        invokes the tool: the outcome is ``authorized``, ``awaiting_approval``,
        ``rejected``, or whatever the ledger already holds for the call (it ran, it
        runs). The decision is the one ``execute`` takes (policy, quotas charged);
        a later ``execute`` of the same call runs it, re-checking that decision.
        """
        _checked(options, CallOptions, "decide")
        return self._runner.serve_sync(self._drive(task_id, call, options, decide=True))

    async def adecide(
        self, task_id: str, call: CallLike, **options: Unpack[CallOptions]
    ) -> Outcome:
        """``decide`` for async code: database work off the loop."""
        _checked(options, CallOptions, "adecide")
        return await self._runner.serve_async(
            self._drive(task_id, call, options, decide=True)
        )

    def _drive(
        self, task_id: str, call: CallLike, options: CallOptions, *, decide: bool = False
    ) -> CallWalk:
        """The walk of one handed-in call (``CallDriver.drive_call``), for the runner to
        serve: not a ``CallDriver`` (the gate holds one, ``self._driver``)."""
        return self._driver.drive_call(
            task_id, as_call(call), None, self._context(options), decide_only=decide
        )

    # ------------------------------------------------------------ whole tasks

    def resume(self, task_id: str) -> list[Outcome]:
        """Carry a task as far as the ledger allows, each call at most once.

        Decides calls left ``received``, runs calls that are ``authorized``, runs
        approved calls (consuming their approval), sweeps calls whose worker died
        and settles or retries in-doubt calls as ``recover`` does. Calls that wait
        for a person stay as they are and are reported. Finished calls are skipped.
        Two processes resuming the same task at once run each call once between them.
        """
        return [self._runner.serve_sync(d) for d in self._resumed(task_id)]

    async def aresume(self, task_id: str) -> list[Outcome]:
        """``resume`` for async code: database work off the loop, tools on it."""
        drivers = await asyncio.to_thread(self._resumed, task_id)
        return [await self._runner.serve_async(d) for d in drivers]

    def _resumed(self, task_id: str) -> list[CallWalk]:
        recs = self.ledger.calls(task_id)
        return [self._driver.drive_record(rec) for rec in recs if rec.state not in TERMINAL]

    def recover(self, task_id: str | None = None) -> list[Outcome]:
        """Sweep calls left ``executing`` by dead workers, and settle what is in doubt.

        A call whose owner is gone becomes ``in_doubt``. An in-doubt call is then
        settled by its tool's reconcile hook, or re-run if its tool is retry-safe
        (``natural`` or ``key``), or left ``in_doubt`` for an operator. Calls still
        running under a live lease are reported ``executing`` and left alone.
        """
        return [self._runner.serve_sync(d) for d in self._recovered(task_id)]

    async def arecover(self, task_id: str | None = None) -> list[Outcome]:
        """``recover`` for async code: database work off the loop, tools on it."""
        drivers = await asyncio.to_thread(self._recovered, task_id)
        return [await self._runner.serve_async(d) for d in drivers]

    def _recovered(self, task_id: str | None) -> list[CallWalk]:
        recs = self.ledger.calls(task_id, [CallState.EXECUTING, CallState.IN_DOUBT])
        return [self._driver.drive_record(rec) for rec in recs]

    def blockers(self, task_id: str) -> list[Blocker]:
        """What stands between the task and its completion, call by call."""
        out: list[Blocker] = []
        for rec in self.ledger.calls(task_id):
            if rec.state in (CallState.SUCCEEDED, CallState.FAILED, CallState.REJECTED):
                continue
            needs, reason = self._driver.needs(rec)
            out.append(Blocker(rec.call_id, rec.tool, rec.state, needs, reason))
        return out

    def calls(self, task_id: str) -> list[Outcome]:
        """Every recorded call of a task, as stored (``replayed=True``)."""
        return [outcome_of(r, replayed=True) for r in self.ledger.calls(task_id)]

    # ------------------------------------------------------------ operators

    def approve(
        self,
        call: str | Outcome,
        *,
        by: str,
        reason: str | None = None,
        task_id: str | None = None,
        ttl: float | None = DEFAULT_APPROVAL_TTL,
        args_hash: str | None = None,
        grant: str | None = None,
        edit: Mapping[str, Any] | None = None,
    ) -> tuple[ApprovalRecord, bool]:
        """A person approves a call that waits for approval; returns it and whether new.

        The approval is bound to the call's argument hash, to a policy hash and to an
        expiry ``ttl`` seconds from now (None: no expiry). The policy hash is the one
        of the policy that asked for the approval; a gate running another policy
        first re-evaluates the call under its own policy and binds the approval to
        that one (``ApprovalRefused`` if that policy denies the call). The call runs
        when a gate with that same policy next sees it (``resume``, ``execute``).

        ``args_hash``: the hash of the arguments the person was shown (``args_hash`` of
        ``Ledger.call_details``); the ledger approves only if the call's arguments still
        hash to it, compared inside the approval's transaction, and otherwise raises
        ``AnswerMismatch`` (audited as ``answer_refused``). None: not compared, for
        callers that show nothing (every front end for people passes it).

        ``grant``: the id of a grant option the call's approve rule offers (``approval:
        grants:``): the approval then also covers later calls of the tool in the task,
        for the option's time, number of calls and argument bounds (``ledger.grants``).

        ``edit``: argument path -> new JSON value, for fields the policy's approve rule
        marks ``editable``. The call becomes a new version (checked against the tool's
        schema and judged again by the policy, ``gate.edit``) and the approval is bound
        to its new hash; ``EditRefused`` names a field that may not change.
        """
        call_id, task_id = self._name(call, task_id)
        if edit is not None:
            from agent_gate.gate.edit import edit_and_approve

            if grant is not None:
                raise GateUsageError("an edit and a grant are separate answers: approve "
                                     "the edit, then give a grant on a later call")

            return edit_and_approve(self.ledger, self._decider, call_id, edit, by=by,
                                    task_id=task_id, reason=reason, ttl=ttl,
                                    args_hash=args_hash)
        check = self._decider if self.rules is not None else None
        return desk.approve(self.ledger, call_id, by=by, task_id=task_id, reason=reason,
                            ttl=ttl, check=check, args_hash=args_hash, grant=grant)

    def editable_fields(self, call: CallRecord) -> tuple[str, ...]:
        """The argument paths a person may edit in ``call`` before approving it
        (``approve(edit=...)``): its approve rules' ``editable`` under this policy."""
        from agent_gate.gate.edit import editable_for

        return editable_for(self._decider, call)

    def deny(
        self,
        call: str | Outcome,
        *,
        by: str,
        reason: str | None = None,
        task_id: str | None = None,
        args_hash: str | None = None,
    ) -> Outcome:
        """A person denies a call that waits for approval: it is rejected, never run
        (``args_hash`` as for ``approve``). Under a rule with ``approvers: {deny:
        quorum}`` the denial is recorded and the call stays ``awaiting_approval`` until
        that many distinct people denied it (the outcome says which)."""
        call_id, task_id = self._name(call, task_id)
        check = self._decider if self.rules is not None else None
        tr = desk.deny(self.ledger, call_id, by=by, task_id=task_id, reason=reason,
                       observer=self.telemetry, args_hash=args_hash, check=check)
        return outcome_of(tr.record, replayed=False)

    def resolve(
        self,
        call: str | Outcome | ToolCall,
        *,
        as_: Reconciliation | str,
        task_id: str | None = None,
        result: Any = None,
        note: str | None = None,
        by: str | None = None,
        args_hash: str | None = None,
    ) -> Outcome:
        """An operator settles an in-doubt call: it ``succeeded``, ``failed``, or was
        ``not_applied`` (which makes it runnable again when the call is next seen);
        ``args_hash`` as for ``approve``. A call still ``executing`` whose owner is
        gone is first lost to ``in_doubt``, then settled."""
        call_id = call if isinstance(call, str) else call.call_id
        rec = self._find_one(call_id if isinstance(call, ToolCall) else call, task_id)
        verdict = _reconciliation(as_)
        actor = f"operator:{by}" if by else "operator"
        found = rec.state
        tr = self._settled(self._in_doubt(rec, actor), verdict, actor=actor, by=by,
                           result=result, note=note, args_hash=args_hash)
        self.telemetry.operator(rec.task_id, rec.call_id, rec.tool, found.value,
                                tr.record.state.value, actor)
        return outcome_of(tr.record, replayed=False)

    def _in_doubt(self, rec: CallRecord, actor: str) -> CallRecord:
        """``rec`` as a call an operator may settle: ``in_doubt`` already, or an
        ``executing`` call whose lease ended, lost to ``in_doubt`` now (re-checked in
        the update: same owner, lease still over); ``NotInDoubt`` otherwise."""
        if rec.state is CallState.EXECUTING:
            ended = lease_end(rec)
            if ended is None:
                raise NotInDoubt(f"call {rec.call_id!r} is running under a live lease")
            rec = self.ledger.lose_if_abandoned(
                rec,
                actor=actor,
                expired_only=ended is LeaseEnd.LEASE_EXPIRED,
                code=LEASE_ENDS[ended].code,
                reason="owner gone when an operator resolved it",
            ).record
        if rec.state is not CallState.IN_DOUBT:
            raise NotInDoubt(f"call {rec.call_id!r} is {rec.state.value}, not in_doubt")
        return rec

    def _settled(
        self, rec: CallRecord, verdict: Reconciliation, *, actor: str, by: str | None,
        result: Any, note: str | None, args_hash: str | None,
    ) -> Transition:
        """The operator's verdict committed on the in-doubt ``rec`` (the result kept
        only for ``succeeded``, the note as the error only for ``failed``);
        ``NotInDoubt`` when the call moved on first."""
        text = f"resolved by {by or 'an operator'} as {verdict.value}"
        if note:
            text += f": {bound(note, 300)}"
        tr = self._finisher.settle(
            rec,
            verdict,
            actor=actor,
            code=R.RESOLVED,
            reason=text,
            result=(
                StoredResult.encode(to_jsonable(result), self.max_result_bytes)
                if verdict is Reconciliation.SUCCEEDED else None
            ),
            error=(
                {"type": "ResolvedFailed", "message": bound(note or text, 300)}
                if verdict is Reconciliation.FAILED else None
            ),
            args_hash=args_hash,
        )
        if not tr.won:
            raise NotInDoubt(
                f"call {rec.call_id!r} changed to {tr.record.state.value} while being resolved"
            )
        return tr

    # ------------------------------------------------------------ waiting for people

    def pending(self, task_id: str | None = None) -> list[Outcome]:
        """Calls that wait for a person's approval (of ``task_id``, or every task)."""
        return waiting.pending(self.ledger, task_id)

    def wait(
        self, call: str | Outcome, *, task_id: str | None = None, timeout: float | None = None
    ) -> waiting.Answer:
        """Block until a person approves or denies ``call`` (by CLI, API, any process),
        or ``timeout`` seconds pass (None: no limit); then ``execute`` runs an approved
        call. ``agent_gate.gate.waiting`` says how (LISTEN/NOTIFY, or polling)."""
        return waiting.wait_answer(self.ledger, self._find_one(call, task_id), timeout)

    async def await_decision(
        self, call: str | Outcome, *, task_id: str | None = None, timeout: float | None = None
    ) -> waiting.Answer:
        """``wait`` for async code: the ledger read off the loop, cancellable at once."""
        rec = await asyncio.to_thread(self._find_one, call, task_id)
        return await waiting.await_answer(self.ledger, rec, timeout)

    @staticmethod
    def _name(call: str | Outcome, task_id: str | None) -> tuple[str, str | None]:
        """The call id and task an argument names (an ``Outcome`` carries its task)."""
        if isinstance(call, str):
            return call, task_id
        return call.call_id, task_id if task_id is not None else call.task_id

    def _find_one(self, call: str | Outcome, task_id: str | None) -> CallRecord:
        return desk.find_one(self.ledger, *self._name(call, task_id))

    # ------------------------------------------------------------ streams

    def dispatch_mode(self, tool_name: str) -> DispatchMode:
        """When a call may run: reads as soon as complete, writes after the response."""
        tool = self._tools.get(tool_name)
        if tool is None or self._decider.defers(tool_name):
            return DispatchMode.ON_RESPONSE_COMPLETE
        if tool.spec.dispatch is not None:
            return DispatchMode(tool.spec.dispatch)
        if self._decider.classes(tool)[0] is Effect.READ:
            return DispatchMode.ON_CALL_COMPLETE
        return DispatchMode.ON_RESPONSE_COMPLETE

    def accumulator_for(self, provider: str, dispatch: Dispatch = None) -> AnyAccumulator:
        """The accumulator ``run`` would use, for a caller that must hold it
        (``provider="auto"``: one that tells the protocol from the first events)."""
        return accumulator(provider, dispatch=self._mode_fn(dispatch))

    def run(
        self, events: Iterable[object], *, task_id: str, provider: str,
        **options: Unpack[RunOptions],
    ) -> RunResult:
        """Drive a response's events through accumulator and gate, calls as they complete.

        ``events`` are SSE events (``ServerSentEvent``), mappings or SDK event
        objects of ``provider``'s protocol. A write whose response then ended
        without success is recorded ``incomplete`` and not run. If the event source
        raises, held calls are still recorded as not run before the error propagates.
        ``options`` (``RunOptions``): ``dispatch``, ``accumulator`` (pass one, see
        ``accumulator_for``, when the source reconnects), ``on_text``, ``principal``,
        ``scope``. ``RunResult.next_input(provider)`` is what to append for the next
        request.
        """
        _checked(options, RunOptions, "run")
        stream = self._stream(task_id, provider, options)
        serve = self._runner.serve_sync
        try:
            for event in _events(events, stream):
                drivers = stream.feed(event)
                if drivers:  # most events release nothing: no generator for them
                    stream.outcomes.extend(serve(d) for d in drivers)
        finally:
            stream.outcomes.extend(serve(d) for d in stream.close())
            stream.after()
        return stream.result()

    async def arun(
        self, events: AsyncIterable[object] | Iterable[object], *, task_id: str, provider: str,
        **options: Unpack[RunOptions],
    ) -> RunResult:
        """``run`` for async event sources and async tools."""
        _checked(options, RunOptions, "arun")
        stream = self._stream(task_id, provider, options)
        serve = self._runner.serve_async
        try:
            async for event in _aevents(events, stream):
                stream.outcomes.extend([await serve(d) for d in stream.feed(event)])
        finally:
            stream.outcomes.extend([await serve(d) for d in stream.close()])
            await asyncio.to_thread(stream.after)
        return stream.result()

    def _stream(self, task_id: str, provider: str, options: RunOptions) -> StreamRun:
        dispatch = options.get("dispatch")
        acc = options.get("accumulator") or self.accumulator_for(provider, dispatch)
        on_text = options.get("on_text")
        if on_text is not None:
            acc.listen_text(on_text)
        return StreamRun(
            self._driver,
            acc,
            self._mode_fn(dispatch),
            task_id=task_id,
            context=self._context(options),
        )

    def _mode_fn(self, dispatch: Dispatch) -> Callable[[str], DispatchMode]:
        if dispatch is None:
            return self.dispatch_mode
        chosen: Callable[[str], DispatchMode] = (
            (lambda _name: dispatch) if isinstance(dispatch, DispatchMode) else dispatch
        )

        def mode(tool_name: str) -> DispatchMode:
            if self._decider.defers(tool_name):
                return DispatchMode.ON_RESPONSE_COMPLETE
            return chosen(tool_name)

        return mode

    def _context(self, options: CallOptions) -> CallContext:
        principal, scope = options.get("principal"), options.get("scope")
        return CallContext.of(principal or self.principal, scope or self.scope)


def _reconciliation(as_: Reconciliation | str) -> Reconciliation:
    """What ``resolve(as_=...)`` names: the enum, or its value with ``-`` for ``_``."""
    try:
        return Reconciliation(str(getattr(as_, "value", as_)).replace("-", "_"))
    except ValueError:
        raise GateUsageError(
            f"as_ must be one of {', '.join(r.value for r in Reconciliation)}"
        ) from None


def _events(events: Iterable[object], stream: StreamRun) -> Iterator[object]:
    """The source's events until it ends or fails on its own terms (the stream's
    failure ends the run quietly; an error of the gate or the ledger propagates)."""
    source = iter(events)
    while not stream.stopped:
        try:
            event = next(source)
        except StopIteration:
            return
        except AgentGateError as exc:
            stream.fail(exc)
            return
        yield event


async def _aevents(
    events: AsyncIterable[object] | Iterable[object], stream: StreamRun
) -> AsyncIterator[object]:
    """``_events`` for an async source (a sync iterable is read as one)."""
    if not isinstance(events, AsyncIterable):
        for event in _events(events, stream):
            yield event
        return
    source = aiter(events)
    while not stream.stopped:
        try:
            event = await anext(source)
        except StopAsyncIteration:
            return
        except AgentGateError as exc:
            stream.fail(exc)
            return
        yield event
