"""The runner: serves a driver's requests (run a tool, ask a reconcile hook) on
threads or on an event loop, and keeps the claimed call's lease alive meanwhile.

The driver (``driver``) is a generator that does all database work itself and
yields only the two things that differ between sync and async callers. This
module is the one place that differs: ``serve_sync`` runs sync tools on the
caller's thread (or a daemon thread when the tool has a timeout) and async tools
under ``asyncio.run``; ``serve_async`` keeps database work off the loop
(``asyncio.to_thread``) and awaits async tools on it. A tool run ends in one of
``RunEnd``; what that means for the call is decided by ``finish``.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from agent_gate.errors import GateUsageError, OutcomeUnknown
from agent_gate.gate.outcome import Outcome
from agent_gate.heartbeat import LeaseKeeper
from agent_gate.ledger.lease import this_owner
from agent_gate.ledger.records import CallRecord
from agent_gate.ledger.states import RunEnd
from agent_gate.ledger.store import Ledger
from agent_gate.telemetry import CallTrace
from agent_gate.tools import CallInfo, Tool

__all__ = ["CallWalk", "Claimed", "Ran", "Reconcile", "RunEnd", "RunTool", "Runner", "current_call",
           "serving"]


@dataclass(slots=True)
class Claimed:
    """A call this process has committed to ``executing`` and must now run."""

    rec: CallRecord
    tool: Tool
    validated: Mapping[str, Any] | BaseModel
    info: CallInfo
    call_id: str
    duplicate_of: str | None
    trace: CallTrace | None = None
    """The call's telemetry: the tool runs inside it (``Runner``), set by the driver."""


@dataclass(frozen=True, slots=True)
class Ran:
    end: RunEnd
    value: Any = None
    exc: BaseException | None = None
    pending: Future[Ran] | None = None
    """A sync tool still running on its thread after a timeout or interruption: its
    eventual outcome settles the call late, once the in-doubt state is committed."""


@dataclass(frozen=True, slots=True)
class RunTool:
    """A walk's request: run the claimed call's tool; answered with a ``Ran``."""

    claimed: Claimed


@dataclass(frozen=True, slots=True)
class Reconcile:
    """A walk's request: ask a reconcile hook; answered with its answer or ``HookFailed``."""

    hook: Callable[[CallInfo], Any]
    info: CallInfo


@dataclass(frozen=True, slots=True)
class HookFailed:
    exc: BaseException


Request = RunTool | Reconcile
CallWalk = Generator[Request, Any, Outcome]
"""One call's walk through its states (``CallDriver``'s): what it yields, a ``Runner``
serves, sync or async; what it returns is the call's ``Outcome``."""

_current: contextvars.ContextVar[CallInfo | None] = contextvars.ContextVar(
    "agent_gate_current_call", default=None
)


@contextmanager
def serving(info: CallInfo) -> Iterator[None]:
    """Within this block ``current_call()`` is ``info``: the one way a tool's call is
    made current, by the runner and by a transactional tool's transaction alike."""
    token = _current.set(info)
    try:
        yield
    finally:
        _current.reset(token)


def current_call() -> CallInfo:
    """The call the running tool serves; ``idempotency_key`` is for downstream APIs."""
    info = _current.get()
    if info is None:
        raise GateUsageError("current_call() is only available inside a tool run by the gate")
    return info


def loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def async_in_loop(tool: Tool) -> bool:
    """An async tool while a loop runs on this thread: a sync entry point cannot await it."""
    return tool.is_async and loop_running()


def refuse_async_in_loop(tool: Tool) -> None:
    """A sync entry point cannot await an async tool while a loop runs on this thread."""
    if async_in_loop(tool):
        raise GateUsageError(
            f"tool {tool.name!r} is async and an event loop is running: use aexecute"
        )


class Runner:
    """Serves drivers; ``finish`` commits what a tool run produced (see ``finish``)."""

    def __init__(
        self, ledger: Ledger, lease_ms: int, finish: Callable[[Claimed, Ran], Outcome]
    ) -> None:
        self.ledger = ledger
        self.lease_ms = lease_ms
        self.finish = finish
        self._leases: LeaseKeeper[CallRecord] = LeaseKeeper(
            self._renew, max(lease_ms / 3000, 0.05)
        )

    def _renew(self, rec: CallRecord) -> bool:
        return self.ledger.renew(rec, owner=this_owner(), lease_ms=self.lease_ms)

    # ------------------------------------------------------------ serving drivers

    def serve_sync(self, gen: CallWalk) -> Outcome:
        answer: Any = None
        try:
            while True:
                request = gen.send(answer)
                if isinstance(request, RunTool):
                    answer = self._run_sync(request.claimed)
                else:
                    answer = _ask(request)
                    if asyncio.iscoroutine(answer):
                        answer = asyncio.run(_settle(answer))
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    async def serve_async(self, gen: CallWalk) -> Outcome:
        answer: Any = None
        while True:
            done, value = await asyncio.to_thread(_step, gen, answer)
            if done:
                return value  # type: ignore[no-any-return]
            if isinstance(value, RunTool):
                answer = await self._run_async(value.claimed)
            else:
                answer = _ask(value)
                if asyncio.iscoroutine(answer):
                    answer = await _settle(answer)

    # ------------------------------------------------------------ running tools

    def _run_sync(self, claimed: Claimed) -> Ran:
        trace = claimed.trace
        if trace is None:
            return self._run_sync_inner(claimed)
        with trace.running():
            ran = self._run_sync_inner(claimed)
        trace.ran(ran.end.value)
        return ran

    def _run_sync_inner(self, claimed: Claimed) -> Ran:
        tool, timeout = claimed.tool, claimed.tool.spec.timeout
        halt = self._leases.hold(claimed.rec)
        future: Future[Ran] | None = None
        try:
            if tool.is_async:
                return asyncio.run(_invoke_async(claimed))
            if timeout is None:
                with serving(claimed.info):
                    return _invoke(claimed)
            future = _start_thread(claimed)
            try:
                return future.result(timeout=timeout)
            except TimeoutError:
                return Ran(RunEnd.TIMEOUT, pending=future)
        except BaseException as exc:
            # KeyboardInterrupt / SystemExit while the tool ran: record the doubt,
            # then let the interruption continue.
            outcome = self.finish(claimed, Ran(RunEnd.INTERRUPTED, exc=exc, pending=future))
            _interrupted(claimed, outcome)
            raise
        finally:
            halt()

    async def _run_async(self, claimed: Claimed) -> Ran:
        trace = claimed.trace
        if trace is None:
            return await self._run_async_inner(claimed)
        with trace.running():
            ran = await self._run_async_inner(claimed)
        trace.ran(ran.end.value)
        return ran

    async def _run_async_inner(self, claimed: Claimed) -> Ran:
        tool, timeout = claimed.tool, claimed.tool.spec.timeout
        halt = self._leases.hold(claimed.rec)
        future: Future[Ran] | None = None
        try:
            if tool.is_async:
                return await _invoke_async(claimed)
            future = _start_thread(claimed)
            try:
                return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout)
            except TimeoutError:
                return Ran(RunEnd.TIMEOUT, pending=future)
        except asyncio.CancelledError as exc:
            interrupted = Ran(RunEnd.INTERRUPTED, exc=exc, pending=future)
            # Shielded: a cancelled task's next await is cancelled too (anyio cancels a
            # scope's task again at each await), and a pool job cancelled before a worker
            # took it never runs: the call would stay ``executing``, not in doubt.
            finishing = asyncio.ensure_future(asyncio.to_thread(self.finish, claimed, interrupted))
            _interrupted(claimed, await asyncio.shield(finishing))
            raise
        finally:
            halt()


def _interrupted(claimed: Claimed, outcome: Outcome) -> None:
    """The run was interrupted: its driver never sees the outcome, so its trace is told."""
    if claimed.trace is not None:
        claimed.trace.ran(RunEnd.INTERRUPTED.value)
        claimed.trace.end(outcome)


def _invoke(claimed: Claimed) -> Ran:
    """Run a sync tool here; what it raised is its outcome, never the caller's error."""
    try:
        return Ran(RunEnd.OK, claimed.tool.invoke(claimed.validated))
    except OutcomeUnknown as exc:
        return Ran(RunEnd.UNKNOWN, exc=exc)
    except Exception as exc:
        return Ran(RunEnd.ERROR, exc=exc)


async def _invoke_async(claimed: Claimed) -> Ran:
    with serving(claimed.info):
        try:
            awaitable: Awaitable[Any] = claimed.tool.invoke(claimed.validated)
            value = await asyncio.wait_for(awaitable, claimed.tool.spec.timeout)
            return Ran(RunEnd.OK, value)
        except TimeoutError:
            return Ran(RunEnd.TIMEOUT)
        except OutcomeUnknown as exc:
            return Ran(RunEnd.UNKNOWN, exc=exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return Ran(RunEnd.ERROR, exc=exc)


def _start_thread(claimed: Claimed) -> Future[Ran]:
    """Run a sync tool on its own daemon thread, so a timeout can stop waiting."""
    future: Future[Ran] = Future()
    ctx = contextvars.copy_context()

    def target() -> None:
        with serving(claimed.info):
            try:
                future.set_result(_invoke(claimed))
            except BaseException as exc:
                future.set_result(Ran(RunEnd.ERROR, exc=exc))

    threading.Thread(
        target=ctx.run, args=(target,), name=f"agent-gate-{claimed.tool.name}", daemon=True
    ).start()
    return future


def _ask(request: Reconcile) -> Any:
    """The reconcile hook's answer, a ``HookFailed`` when it raised, or the coroutine an
    async hook returned: the one body both loops share, each awaiting in its own way."""
    try:
        return request.hook(request.info)
    except Exception as exc:
        return HookFailed(exc)


async def _settle(answer: Any) -> Any:
    """An async hook's answer once awaited, with its failure caught as ``_ask`` does."""
    try:
        return await answer
    except Exception as exc:
        return HookFailed(exc)


def _step(gen: CallWalk, answer: Any) -> tuple[bool, Any]:
    """Advance the driver once; StopIteration cannot cross a thread into a future."""
    try:
        return False, gen.send(answer)
    except StopIteration as stop:
        return True, stop.value
