"""The blocking executor: a caller's ``httpx.Client`` runs the stream loop.

Thin on purpose: the loop (``agent_gate.transport.loop``) says what to send,
read, close and sleep; this module does it with the client and ``time.sleep``.
Every judgement is the session's, every step of the order is the loop's.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator
from typing import Any

import httpx

from agent_gate.sse import ServerSentEvent
from agent_gate.transport.loop import (
    BODY_ERRORS,
    CLOSE,
    READ,
    Clock,
    Exchange,
    IORequest,
    Send,
    Sleep,
    StreamBase,
)
from agent_gate.transport.options import build_request

__all__ = ["BODY_ERRORS", "Clock", "EventStream", "build_request", "stream_events"]


class EventStream(StreamBase[httpx.Client]):
    """An iterable of events over one logical stream, reconnects included.

    Iterate it once; use it as a context manager (or call ``close``) so the
    response is closed even when iteration stops early.
    """

    default_sleep = staticmethod(time.sleep)
    _gen: Generator[ServerSentEvent, None, None] | None = None
    _chunks: Iterator[bytes] | None = None

    def __iter__(self) -> Iterator[ServerSentEvent]:
        self._gen = self._run(self._start())
        return self._gen

    def _run(self, exchange: Exchange) -> Generator[ServerSentEvent, None, None]:
        try:
            for step in exchange:
                if isinstance(step, ServerSentEvent):
                    yield step
                else:
                    exchange.answer(self._perform, step)
        finally:
            exchange.close()
            self._release()

    def _perform(self, request: IORequest) -> Any:
        match request:
            case Send(request=outgoing):
                response = self._client.send(outgoing, stream=True)
                self._response, self._chunks = response, response.iter_bytes()
                return response
            case Sleep(delay=delay):
                self._sleep(delay)
            case _ if request is READ and self._chunks is not None:
                return next(self._chunks, None)
            case _ if request is CLOSE:
                self._release()
        return None

    def _release(self) -> None:
        response, self._response = self._response, None
        if response is not None:
            response.close()

    def close(self) -> None:
        if self._gen is not None:
            self._gen.close()
        self._release()
        self._session.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


stream_events = EventStream.open
"""``stream_events(client, method, url, *, is_terminal, options=None, ...)``: an
``EventStream`` with ``client`` (see ``StreamBase.open`` for every argument)."""
