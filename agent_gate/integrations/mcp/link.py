"""The proxy's connection to its upstream: made, watched, and made again when it is lost.

A ``Link`` holds the one ``ClientSession`` the proxy's calls are dispatched on,
or none while the upstream is down; the tools registered in the gate dispatch
through it (``upstream``), so after a restart they reach the new session. The
first connection must succeed: a command that cannot be started, exits at once,
or never answers ``initialize`` within ``start_timeout`` is a configuration
error (``UpstreamUnavailable``, one line), not something a retry mends. After
that, a lost connection (a stdio server's stdout ends or a write to it fails; an
HTTP server cannot be reached or forgot the session; a call's connection broke)
is made again after a bounded exponential backoff with jitter, forever, when
``restart`` is set; otherwise ``run`` raises ``UpstreamUnavailable`` and the
proxy stops.

While the link is down the proxy refuses calls before recording them
(``calls``), so nothing is claimed that cannot be delivered.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskStatus
from mcp import ClientSession
from mcp.client.session import MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client

from agent_gate.errors import UpstreamUnavailable, error_code
from agent_gate.integrations.mcp.peer import ClientPeer
from agent_gate.integrations.mcp.wire import Deliveries, recording_http_client, stdio_transport

__all__ = ["DEFAULT_START_TIMEOUT", "Backoff", "Fixed", "Link"]

DEFAULT_START_TIMEOUT = 30.0
"""Seconds an upstream has to start and answer ``initialize`` (``--upstream-timeout``)."""

STANDALONE_WAIT = 5.0
"""Seconds a new HTTP upstream session waits for its standalone stream to open before
it is used anyway (a server may hold that stream's headers until its first event)."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays between attempts to reconnect: ``first`` doubling up to ``most``, each
    shortened by up to ``jitter`` of itself at random, so proxies that lost one
    upstream together do not knock on it in step."""

    first: float = 0.1
    most: float = 5.0
    jitter: float = 0.25

    def delays(self) -> Iterator[float]:
        delay = self.first
        while True:
            yield delay * (1.0 - self.jitter * random.random())
            delay = min(delay * 2.0, self.most)


class Fixed:
    """A link to a session someone else made and owns (``GatedSession``): no restart,
    no record of delivery (a broken connection is then always in doubt)."""

    wire: Deliveries | None = None

    def __init__(self, session: ClientSession) -> None:
        self.session: ClientSession | None = session

    def lost(self) -> None:
        """Nothing to do: the session's owner sees its connection end."""


class Link:
    """The proxy's connection to ``command`` (over stdio) or ``url`` (Streamable HTTP)."""

    def __init__(
        self,
        command: Sequence[str] = (),
        url: str | None = None,
        *,
        restart: bool = True,
        backoff: Backoff = Backoff(),
        start_timeout: float = DEFAULT_START_TIMEOUT,
        on_message: MessageHandlerFnT | None = None,
        on_up: Callable[[], Awaitable[Any]] | None = None,
        peer: ClientPeer | None = None,
    ) -> None:
        self.command = tuple(command)
        self.url = url
        self.restart = restart
        self.backoff = backoff
        self.start_timeout = start_timeout
        self.on_message = on_message
        self.on_up = on_up
        """Run each time a session is made (the tools re-read), before calls use it."""
        self.peer = peer
        """The client session this link serves: the upstream's requests for input
        (sampling, elicitation, roots) are put to it; without one they are refused."""
        self.wire: Deliveries | None = Deliveries()
        self.session: ClientSession | None = None
        self.why_down = "the upstream is starting"
        self._lost = anyio.Event()

    @property
    def name(self) -> str:
        return self.url if self.url is not None else os.path.basename(self.command[0])

    def lost(self) -> None:
        """A call saw the connection break: make it again (the supervisor does)."""
        self._lost.set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect, report started, then keep the link up until cancelled.

        Raises ``UpstreamUnavailable`` when the first connection fails, and when a
        later one is lost and ``restart`` is off."""
        started = False
        delays = self.backoff.delays()
        while True:
            try:
                async with self.connected():
                    if not started:
                        started = True
                        task_status.started()
                    delays = self.backoff.delays()
                    await self._lost.wait()
                why = f"the upstream {self.name} went away"
            except Exception as exc:  # the transport failed under the session
                said = _said(exc)
                if said is not None and not started:
                    raise said from None
                if said is not None:
                    why = str(said)
                elif not started:
                    raise UpstreamUnavailable(
                        f"cannot reach the upstream {self.url} ({_leaf(exc)})" if self.url
                        else f"the upstream {self.name} failed while starting ({_leaf(exc)})"
                    ) from None
                else:
                    why = f"the upstream {self.name} went away ({_leaf(exc)})"
            self.why_down = why
            if not self.restart:
                raise UpstreamUnavailable(f"{why}; not restarted (--no-upstream-restart)")
            delay = next(delays)
            _say(f"{why}; trying again in {delay:.1f}s")
            await anyio.sleep(delay)

    @asynccontextmanager
    async def connected(self) -> AsyncIterator[ClientSession]:
        """One session, initialized and announced (``on_up``); ``session`` while it lives."""
        self._lost = anyio.Event()
        self.wire = Deliveries()
        failed: UpstreamUnavailable | None = None
        async with AsyncExitStack() as stack:
            try:
                session = await self._open(stack)
                with anyio.fail_after(self.start_timeout):  # around no context entered
                    await session.initialize()
            except TimeoutError:
                failed = UpstreamUnavailable(
                    f"the upstream {self.name} did not answer initialize within "
                    f"{self.start_timeout:g}s"
                )
            except OSError as exc:
                failed = UpstreamUnavailable(
                    f"cannot start the upstream {self.command[0]!r}: "
                    f"{exc.strerror or error_code(exc)}"
                )
            except Exception as exc:
                failed = UpstreamUnavailable(
                    f"the upstream {self.name} closed the connection before it answered "
                    f"initialize ({_leaf(exc)})"
                )
            if failed is None:
                await self._standalone_opened()
                self.session = session
                try:
                    if self.on_up is not None:
                        await self.on_up()
                    yield session
                finally:
                    self.session = None
                    self.why_down = f"the upstream {self.name} went away"
        if failed is not None:  # raised once the transport is closed: as itself, no group
            raise failed

    async def _standalone_opened(self) -> None:
        """Until an HTTP upstream session's standalone GET stream was answered.

        What the server sends that relates to no request of ours (a sampling or
        elicitation request made outside a request's stream, a list change) goes on
        that stream, and a server only stores, never delivers, what it sends while
        the stream is not open. The SDK's client opens it after ``initialize`` and
        does not wait for it, so a call sent at once could make the server ask on a
        stream not open yet, and wait for ever for the answer. Bounded by
        ``STANDALONE_WAIT``; none when the server keeps no session (no stream)."""
        wire = self.wire
        if self.url is None or wire is None or not wire.sessioned:
            return
        with anyio.move_on_after(STANDALONE_WAIT):
            await wire.standalone.wait()

    async def _open(self, stack: AsyncExitStack) -> ClientSession:
        assert self.wire is not None
        if self.url is not None:
            client = await stack.enter_async_context(recording_http_client(self.wire, self._lost))
            read, write = await stack.enter_async_context(
                streamable_http_client(self.url, http_client=client)
            )
        else:
            read, write = await stack.enter_async_context(  # type: ignore[assignment]
                stdio_transport(self.command, dict(os.environ), self.wire, self._lost)
            )
        peer = self.peer
        return await stack.enter_async_context(ClientSession(
            read, write, message_handler=self.on_message,
            sampling_callback=peer.sampling if peer is not None else None,
            elicitation_callback=peer.elicitation if peer is not None else None,
            list_roots_callback=peer.list_roots if peer is not None else None,
        ))


def _said(exc: BaseException) -> UpstreamUnavailable | None:
    """Our own one-line error, also from inside the exception groups task groups raise."""
    if isinstance(exc, UpstreamUnavailable):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _said(inner)) is not None:
                return found
    return None


def _leaf(exc: BaseException) -> str:
    """The innermost exception's type, through exception groups and causes."""
    while True:
        if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        elif exc.__cause__ is not None:
            exc = exc.__cause__
        else:
            return error_code(exc)


def _say(line: str) -> None:
    print(f"agent-gate mcp proxy: {line}", file=sys.stderr, flush=True)
