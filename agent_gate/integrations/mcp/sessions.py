"""One upstream session per client session of the proxy, closed when the client's ends.

A client session's upstream session is where its calls run and where what the
upstream sends on its own comes from, so nothing one client causes (a log line, a
progress report, a sampling request, a resource update) can reach another: over
Streamable HTTP to the upstream, each client session has an upstream session of
its own; over stdio, a child process of its own. The proxy's first link (``serve``)
still reads the tools and capabilities the proxy offers and proves the upstream can
be reached; a stdio proxy has one client, whose session that first link is.

A client session's link is made on its first request that needs the upstream, runs
in the proxy's task group (restarted with backoff like the first, ``Link``), and is
closed when the client's connection ends: a ``DELETE``, the SDK's idle timeout, a
stdio client leaving (the SDK unwinds the connection's ``exit_stack``). The ledger
is shared by all of them, so a repeated write in one task still runs once, whatever
session or process sends it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus
from mcp.server.context import ServerRequestContext

from agent_gate.errors import UpstreamUnavailable
from agent_gate.integrations.mcp.link import Link
from agent_gate.integrations.mcp.peer import Audit, ClientPeer
from agent_gate.integrations.mcp.sampling import SamplingCalls
from agent_gate.policy.mcp_rules import McpPolicy

__all__ = ["ClientUpstream", "UpstreamSessions", "connection_of", "made_for"]

_STATE_KEY = "agent-gate/upstream"


@dataclass(frozen=True, slots=True)
class ClientUpstream:
    """A client session's upstream: its link, and what delivers to the client."""

    link: Link
    peer: ClientPeer


def connection_of(ctx: ServerRequestContext[Any, Any]) -> Any:
    """The client's connection: ``ctx.session`` is made per request, and the SDK's
    request context does not expose the connection, so it is taken from the session
    (``_connection``), else the session."""
    return getattr(ctx.session, "_connection", ctx.session)


def made_for(ctx: ServerRequestContext[Any, Any]) -> ClientUpstream | None:
    """The upstream already made for ``ctx``'s client session, if any."""
    state = getattr(connection_of(ctx), "state", None)
    made = state.get(_STATE_KEY) if isinstance(state, dict) else None
    return made if isinstance(made, ClientUpstream) else None


class UpstreamSessions:
    """The upstream of each client session: ``shared`` for every one (a stdio proxy's
    one client), else one made per client session with ``make``."""

    def __init__(
        self, tg: TaskGroup | None, make: Callable[[ClientPeer], Link],
        rules: Callable[[], McpPolicy | None] = lambda: None,
        shared: ClientUpstream | None = None,
        most: int | None = None,
        audit: Audit | None = None,
        sampler: SamplingCalls | None = None,
    ) -> None:
        self.tg = tg
        self.make = make
        self.rules = rules
        self.audit = audit
        self.sampler = sampler
        self.task_of: Callable[[ServerRequestContext[Any, Any]], str | None] = lambda ctx: None
        """The task of a request's client session (the proxy server sets it): where
        that session's sampling requests are recorded."""
        self.most = most
        """How many client sessions may have an upstream session open at once (each may
        be a child process): the next one is refused, to retry, until one ends."""
        self.shared = shared
        self.opened = 0
        """How many client sessions had an upstream session made for them."""
        self.live = 0
        """How many of those are open now."""

    async def of(self, ctx: ServerRequestContext[Any, Any]) -> ClientUpstream:
        """The upstream of ``ctx``'s client session, made (and connected) on first use.
        ``UpstreamUnavailable`` when it cannot be reached now (asked again next time)."""
        if self.shared is not None:
            self.shared.peer.attach(ctx, self.task_of(ctx))
            return self.shared
        connection = connection_of(ctx)
        state: dict[str, Any] | None = getattr(connection, "state", None)
        if state is None:
            raise UpstreamUnavailable("the client's connection cannot hold an upstream session")
        made = state.get(_STATE_KEY)
        if isinstance(made, ClientUpstream):
            return made
        lock = state.setdefault(_STATE_KEY + "/lock", anyio.Lock())
        async with lock:
            made = connection.state.get(_STATE_KEY)
            if isinstance(made, ClientUpstream):
                return made
            if self.most is not None and self.live >= self.most:
                raise UpstreamUnavailable(
                    f"{self.live} client sessions have an upstream session open, the most "
                    "this proxy keeps (--max-upstream-sessions); one must end first")
            peer = ClientPeer(self.rules, self.audit, self.sampler)
            peer.attach(ctx, self.task_of(ctx))
            link = self.make(peer)
            close = await self._start(link)
            made = ClientUpstream(link, peer)
            connection.state[_STATE_KEY] = made
            connection.exit_stack.push_async_callback(close)
            return made

    async def _start(self, link: Link) -> Callable[[], Any]:
        """Run ``link`` in the proxy's task group; the coroutine function that ends it."""
        assert self.tg is not None
        scope = anyio.CancelScope()
        done = anyio.Event()

        async def run(*, task_status: TaskStatus[None]) -> None:
            told = _Told(task_status)
            try:
                with scope:
                    await link.run(task_status=told)  # type: ignore[arg-type]
            except UpstreamUnavailable as exc:  # lost, not restarted: this session's only
                if not told.done:
                    raise  # never up: the request that asked for it says so
                print(f"agent-gate mcp proxy: a client session's upstream: {exc}",
                      file=sys.stderr)
            finally:
                done.set()

        await self.tg.start(run)
        self.opened += 1
        self.live += 1

        async def close() -> None:
            scope.cancel()
            await done.wait()
            self.live -= 1

        return close


class _Told:
    """A task status that remembers whether it was reported."""

    def __init__(self, inner: TaskStatus[None]) -> None:
        self.inner = inner
        self.done = False

    def started(self, value: None = None) -> None:
        self.done = True
        self.inner.started(value)
