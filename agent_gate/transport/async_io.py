"""The asyncio executor: a caller's ``httpx.AsyncClient`` runs the stream loop.

The same loop (``agent_gate.transport.loop``), the same session and decisions
as ``sync_io``; only the waiting differs. Use the stream as ``async with``: an
async generator abandoned by a ``break`` is not closed until it is
garbage-collected, and the response would stay open until then.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import httpx

from agent_gate.sse import ServerSentEvent
from agent_gate.transport.loop import (
    CLOSE,
    READ,
    Exchange,
    IORequest,
    Send,
    Sleep,
    StreamBase,
)

__all__ = ["AsyncEventStream", "astream_events"]


class AsyncEventStream(StreamBase[httpx.AsyncClient]):
    """The async counterpart of ``EventStream``: ``async with`` it, ``async for`` it."""

    default_sleep = staticmethod(asyncio.sleep)
    _gen: AsyncGenerator[ServerSentEvent, None] | None = None
    _chunks: AsyncIterator[bytes] | None = None

    def __aiter__(self) -> AsyncIterator[ServerSentEvent]:
        self._gen = self._run(self._start())
        return self._gen

    async def _run(self, exchange: Exchange) -> AsyncGenerator[ServerSentEvent, None]:
        try:
            for step in exchange:
                if isinstance(step, ServerSentEvent):
                    yield step
                else:
                    await exchange.aanswer(self._perform, step)
        finally:
            exchange.close()
            await self._release()

    async def _perform(self, request: IORequest) -> Any:
        match request:
            case Send(request=outgoing):
                response = await self._client.send(outgoing, stream=True)
                self._response, self._chunks = response, response.aiter_bytes()
                return response
            case Sleep(delay=delay):
                await self._sleep(delay)
            case _ if request is READ and self._chunks is not None:
                return await anext(self._chunks, None)
            case _ if request is CLOSE:
                await self._release()
        return None

    async def _release(self) -> None:
        response, self._response = self._response, None
        chunks, self._chunks = self._chunks, None
        if chunks is not None:
            await chunks.aclose()  # type: ignore[attr-defined]
        if response is not None:
            await response.aclose()

    async def aclose(self) -> None:
        if self._gen is not None:
            await self._gen.aclose()
        await self._release()
        self._session.close()

    async def __aenter__(self) -> AsyncEventStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


astream_events = AsyncEventStream.open
"""``astream_events(client, method, url, *, is_terminal, options=None, ...)``: an
``AsyncEventStream`` with ``client`` (the same arguments and rules as ``stream_events``)."""
