"""One ``tools/call`` through the gate: recorded, judged, run at most once, waited on.

``GatedCalls`` is shared by the client-side ``GatedSession`` and the proxy. It turns
a call as MCP delivers it (a tool name, an argument object, ``_meta``) into a gate
call under the id ``identity`` gives it, and keeps the request open while the call
waits: for an approval (an operator's ``agent-gate approve``, or the user's own
answer to an elicitation when the policy lets the task's principal approve), or for
another request that is running the same call. While it waits it reports progress
(at once, then every ``progress_every`` seconds) to a client that sent a progress
token: a client that resets its request timeout on progress (the TypeScript SDK's
``resetTimeoutOnProgress``) keeps waiting. When the wait ends first, the result says
the call waits, with its id; the same call sent again attaches to it.

When the client goes away. A held call runs only inside the request that holds it:
the approval is waited for, and the call then run, by that request's handler. A
request the client cancels (``notifications/cancelled``, which a client sends when
its own timeout fires) or whose session ends (``DELETE``, idle timeout) ends its
handler, and with it the hold, at once: nothing is left to run the call later. The
call stays recorded as waiting; an approval given afterwards binds it (it is
recorded and used once), and the call runs when the same call is sent again in the
same task, by a request that waits for its result. A client whose connection only
broke (no cancel) still has its request: the hold goes on until approval or
``approval_wait``, and the result is kept for it to resume (``events``).

A call waiting for a person is waited on with ``Gate.await_decision``, the gate's
one way of waiting for an answer: ``LISTEN``/``NOTIFY`` on PostgreSQL, re-reads with
backoff on SQLite (``agent_gate.gate.waiting``), so an approval given by any
process, on any machine sharing the database, releases the request. A call running
in another request has no notification for its end: its row is re-read with the
same backoff. Progress is reported meanwhile by its own task.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.to_thread
import mcp.types as mt
from mcp import ClientSession

from agent_gate.errors import GateUsageError, NotAwaitingApproval, NotInDoubt, UpstreamUnavailable
from agent_gate.gate import Gate, Outcome
from agent_gate.gate.desk import MCP_PROVIDER
from agent_gate.gate.waiting import POLL_MAX, POLL_MIN
from agent_gate.integrations.mcp.identity import CallIds, asked_call_id
from agent_gate.integrations.mcp.link import Fixed, Link
from agent_gate.integrations.mcp.protocol import Progress
from agent_gate.integrations.mcp.results import result_of, unavailable
from agent_gate.integrations.mcp.upstream import (
    Registered,
    Route,
    list_all,
    register_tools,
    routed,
    undelivered,
)
from agent_gate.ledger.states import TERMINAL, CallState
from agent_gate.policy import Principal

__all__ = ["DEFAULT_PROGRESS_EVERY", "Asker", "GatedCalls", "GatedSession", "Progress"]

DEFAULT_PROGRESS_EVERY = 10.0
"""Seconds between progress notifications while a call is held: well inside any
client's request timeout (the TypeScript SDK's is 60 s), few enough to store."""

Asker = Callable[[Outcome], Awaitable[bool]]
"""Asks the user to decide a waiting call; True when they answered (either way)."""

_WAITING = (CallState.AWAITING_APPROVAL, CallState.EXECUTING, CallState.AUTHORIZED,
            CallState.RECEIVED)

_ANSWERABLE = (*TERMINAL, CallState.IN_DOUBT, CallState.AWAITING_APPROVAL)
"""States of a call the gate answers without its upstream (its outcome, or what it
waits for): while the upstream is down, only calls in these are sent to the gate."""


class GatedCalls:
    """Calls to one upstream session, each through ``gate`` (tools registered from it).

    ``upstream`` is a session, or the proxy's ``Link`` (which may be down, and comes
    back with a new session: the tools dispatch through it)."""

    def __init__(
        self,
        gate: Gate,
        upstream: ClientSession | Link,
        *,
        approval_wait: float = 0.0,
        principal: Principal | None = None,
        dedupe: Mapping[str, Sequence[str]] | None = None,
        progress_every: float = DEFAULT_PROGRESS_EVERY,
    ) -> None:
        if not (math.isfinite(progress_every) and progress_every > 0):
            raise GateUsageError(f"progress_every must be a positive number of seconds, "
                                 f"not {progress_every}")
        self.gate = gate
        self.link: Link | Fixed = upstream if isinstance(upstream, Link) else Fixed(upstream)
        self.approval_wait = approval_wait
        self.progress_every = progress_every
        self.principal = principal
        self.dedupe = dict(dedupe or {})
        """Tool -> the argument names its calls are deduplicated by (``ToolSpec.dedupe``)."""
        self.ids = CallIds(gate)
        self.registered = Registered((), ())
        self.listed: list[mt.Tool] | None = None
        """The upstream's tools as last read (what a client is shown while it is down)."""

    @property
    def upstream(self) -> ClientSession | None:
        """The session calls go to now (None while the proxy's upstream is down)."""
        return self.link.session

    async def load_tools(self, link: Link | Fixed | None = None) -> list[mt.Tool]:
        """The upstream's tools as ``link`` (default: ``upstream``) lists them, registered
        in the gate's registry (new ones only). ``UpstreamUnavailable`` while it is down."""
        link = link if link is not None else self.link
        session = link.session
        if session is None:
            raise UpstreamUnavailable(_why_down(link))
        tools, malformed = await list_all(session)
        refused = {name for name, _ in self.registered.refused}
        done = register_tools(self.gate, self.link,
                              [t for t in tools if t.name not in refused], self.dedupe)
        new = tuple((name, why) for name, why in malformed if name not in refused)
        self.registered = Registered(
            self.registered.added + done.added, self.registered.refused + done.refused + new,
            done.kept,
        )
        self.listed = tools
        return tools

    def visible(self, tools: list[mt.Tool]) -> list[mt.Tool]:
        """The tools a client is shown: those the gate can check and the policy names.

        A tool the policy file does not name is denied whatever its arguments (the
        policy denies by default), so it is not offered; nor is one whose schema the
        gate refused. Without a policy file every checkable tool is shown. Each is
        shown with the schema the gate checks it against (``Registered.kept``).
        """
        named = set(self.gate.rules.policy.tools) if self.gate.rules is not None else None
        return [t.model_copy(update={"input_schema": dict(self.gate.tools[t.name].spec.schema)})
                for t in tools if t.name in self.gate.tools
                and (named is None or t.name in named)]

    async def call(
        self,
        task_id: str,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        meta: Mapping[str, Any] | None = None,
        progress: Progress | None = None,
        ask: Asker | None = None,
        wait: float | None = None,
        route: Route | None = None,
    ) -> mt.CallToolResult:
        """Run one call through the gate and hold it up to ``wait`` seconds (default
        ``approval_wait``) while it waits; the result as an MCP tool result.

        ``route`` names the upstream session the call goes to and where its progress
        goes (the proxy's client session's own); default: ``upstream``.
        While the upstream is down the call is refused before it is recorded (a
        result that says to retry); one whose request turned out not to leave is
        settled ``not_applied`` (runnable again) and refused the same way."""
        route = route if route is not None else Route(self.link)
        with routed(route):
            return await self._call(task_id, name, arguments, meta, progress, ask, wait,
                                    route.link)

    async def _call(
        self, task_id: str, name: str, arguments: Mapping[str, Any] | None,
        meta: Mapping[str, Any] | None, progress: Progress | None, ask: Asker | None,
        wait: float | None, link: Link | Fixed,
    ) -> mt.CallToolResult:
        if name not in self.gate.tools:
            if link.session is None:
                return unavailable(name, _why_down(link))
            await self.load_tools(link)  # a tool the upstream added since it was listed
        args = dict(arguments or {})
        call_id = asked_call_id(meta) or await anyio.to_thread.run_sync(
            self.ids.derive, task_id, name, args
        )
        if link.session is None:  # down: only what the ledger holds is answered
            rec = await anyio.to_thread.run_sync(self.gate.ledger.get, task_id, call_id)
            if rec is None or rec.state not in _ANSWERABLE:
                return unavailable(name, _why_down(link))
        # Its tasks are recorded as the proxy's: an operator is told the call runs here.
        call = {"call_id": call_id, "name": name, "arguments": args, "provider": MCP_PROVIDER}
        deadline = time.monotonic() + (self.approval_wait if wait is None else wait)
        outcome = await self.gate.aexecute(task_id, call, principal=self.principal)
        outcome = await self.held(task_id, call, outcome, deadline, progress, ask)
        if outcome.state is CallState.IN_DOUBT and undelivered(outcome.exception):
            return await self._undelivered(task_id, outcome)
        rec = await anyio.to_thread.run_sync(self.gate.ledger.get, task_id, _held_by(outcome))
        return result_of(outcome, rec.rule_ids if rec is not None else ())

    async def _undelivered(self, task_id: str, outcome: Outcome) -> mt.CallToolResult:
        """Make a call whose request never reached the upstream runnable again: it was
        lost to ``in_doubt`` (the one way out of ``executing``); ``not_applied`` (RETRY)
        is true of it, so it is settled so, by the proxy, on the record."""
        call_id = _held_by(outcome)
        with contextlib.suppress(NotInDoubt):  # settled meanwhile: their word stands
            await anyio.to_thread.run_sync(lambda: self.gate.resolve(
                call_id, as_="not_applied", task_id=task_id, by="agent-gate-mcp-proxy",
                note="its request never reached the upstream",
            ))
        return unavailable(outcome.tool, str(outcome.exception), call_id)

    async def held(
        self, task_id: str, call: dict[str, Any], outcome: Outcome, deadline: float,
        progress: Progress | None = None, ask: Asker | None = None,
    ) -> Outcome:
        """``call`` (whose first outcome is ``outcome``) held while it waits, until
        ``deadline`` (``time.monotonic``), with progress reported meanwhile; the last
        outcome. The one hold of every request the proxy keeps open for a person."""
        if outcome.state not in _WAITING or deadline <= time.monotonic():
            return outcome
        failed: Exception | None = None
        async with anyio.create_task_group() as tg:
            if progress is not None:
                tg.start_soon(_report, progress, outcome, deadline, self.progress_every)
            try:
                outcome = await self._hold(task_id, call, outcome, deadline, ask)
            except Exception as exc:  # raised as itself, not in an exception group
                failed = exc
            tg.cancel_scope.cancel()
        if failed is not None:
            raise failed
        return outcome

    async def _hold(
        self, task_id: str, call: dict[str, Any], outcome: Outcome, deadline: float,
        ask: Asker | None,
    ) -> Outcome:
        """Re-run ``call`` through the gate each time what it waits for changes, until
        it stops waiting or ``deadline`` passes; the last outcome."""
        asked = False
        used: set[str] = set()  # approvals seen: one the gate would not use ends the wait
        while outcome.state in _WAITING:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if outcome.state is CallState.AWAITING_APPROVAL:
                if ask is not None and not asked:
                    asked = True
                    if await ask(outcome):
                        outcome = await self.gate.aexecute(task_id, call, principal=self.principal)
                        continue
                try:
                    answer = await self.gate.await_decision(
                        _held_by(outcome), task_id=task_id,
                        timeout=left if math.isfinite(left) else None,
                    )
                except NotAwaitingApproval:  # it moved on between two reads: look again
                    answer = None
                if answer is not None and not answer.decided:
                    break
                if answer is not None and answer.approval is not None:
                    if answer.approval.id in used:
                        break
                    used.add(answer.approval.id)
            elif not await self._ran_elsewhere(outcome, deadline):
                break
            outcome = await self.gate.aexecute(task_id, call, principal=self.principal)
        return outcome

    async def _ran_elsewhere(self, outcome: Outcome, deadline: float) -> bool:
        """Until the row of a call another request runs changes (True) or ``deadline``
        passes (False). No notification exists for a run's end: re-read with backoff."""
        ledger = self.gate.ledger

        def look() -> tuple[Any, ...]:
            rec = ledger.get(outcome.task_id, _held_by(outcome))
            return (None,) if rec is None else (rec.state, rec.version)

        seen = await anyio.to_thread.run_sync(look)
        pause = POLL_MIN
        while (left := deadline - time.monotonic()) > 0:
            await anyio.sleep(min(pause, left))
            pause = min(pause * 2, POLL_MAX)
            if await anyio.to_thread.run_sync(look) != seen:
                return True
        return False


def _why_down(link: Link | Fixed) -> str:
    return link.why_down if isinstance(link, Link) else "the upstream session is closed"


def _held_by(outcome: Outcome) -> str:
    """The id of the ledger's row for ``outcome``: the call it duplicates (same dedupe
    key, another call id), else its own."""
    return outcome.duplicate_of or outcome.call_id


async def _report(progress: Progress, outcome: Outcome, deadline: float, every: float) -> None:
    """Progress at once and then every ``every`` seconds while a call is held (until
    cancelled): a client that counts a request's silence as failure sees it is alive."""
    start = time.monotonic()
    total = deadline - start if math.isfinite(deadline) else None
    ticks = 0
    while True:
        await anyio.sleep(max(start + ticks * every - time.monotonic(), 0.0))
        ticks += 1
        try:
            await progress(time.monotonic() - start, total,
                           f"call {outcome.call_id} waits ({outcome.state.value})")
        except Exception:  # the client cannot be told (gone, or refuses): keep waiting
            return


class GatedSession:
    """An ``mcp.ClientSession`` whose ``call_tool`` goes through a gate.

    ``gate`` is an ordinary ``Gate(ToolRegistry(), db, policy=...)``: the session's
    tools are registered into its registry from the server's own ``tools/list`` (see
    ``upstream``), on the first ``list_tools`` or ``call_tool``. Every call is
    recorded in ``task_id``; ``identity`` says which calls count as the same one.
    A call that waits for approval is held up to ``approval_wait`` seconds (default:
    not held) and then returned as a result that says it waits. ``dedupe`` gives
    tools a dedupe key (tool -> argument names), as ``--dedupe`` does for the proxy.
    Everything else is the wrapped session's.
    """

    def __init__(
        self,
        session: ClientSession,
        gate: Gate,
        *,
        task_id: str,
        approval_wait: float = 0.0,
        principal: Principal | None = None,
        dedupe: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.session = session
        self.task_id = task_id
        self.calls = GatedCalls(gate, session, approval_wait=approval_wait, principal=principal,
                                dedupe=dedupe)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    async def list_tools(self) -> mt.ListToolsResult:
        """The server's tools (all pages), registered in the gate as they are listed."""
        return mt.ListToolsResult(tools=await self.calls.load_tools())

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        progress: Progress | None = None,
    ) -> mt.CallToolResult:
        """Call ``name`` through the gate; ``meta`` may carry ``agent-gate/call-id``."""
        return await self.calls.call(
            self.task_id, name, arguments, meta=meta, progress=progress
        )
