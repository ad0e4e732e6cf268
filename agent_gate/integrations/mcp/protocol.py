"""The shapes the MCP proxy's call path and its client peer hand each other.

Why a module of its own. A gated call reaches its client through the link and the
peer (``calls -> link -> peer``), and the peer hands a sampling request back to the
gate that recorded the call it served. If the peer named ``calls`` or ``sampling`` to
say what it holds, the modules would form a circle with no bottom to read or test
from (issue 31). So what they exchange is declared here, below all of them: the
progress callback of a held request, the sampling request's answer, and what the peer
needs of whatever records sampling requests (``sampling.SamplingCalls`` is one).
This module imports no other module of the proxy.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import mcp.types as mt

from agent_gate.ledger.states import CallState

__all__ = ["Ask", "Progress", "Sampled", "Sampler"]

Progress = Callable[[float, float | None, str], Awaitable[None]]
"""``(progress, total, message)``: where a held request reports that it waits."""

Ask = Callable[[], Awaitable[mt.CreateMessageResultWithTools | mt.ErrorData]]
"""Puts the request to the client: its answer, or the error the upstream is to get."""


@dataclass(frozen=True, slots=True)
class Sampled:
    """What became of one sampling request."""

    answer: mt.CreateMessageResultWithTools | mt.ErrorData
    """What the upstream is answered."""
    call_id: str
    state: CallState
    rule_ids: tuple[str, ...]
    refused: str | None
    """Why the client was not asked (denied, not answered in time), else None."""


class Sampler(Protocol):
    """What the peer needs of the recorder of sampling requests."""

    @property
    def own_task(self) -> str:
        """The task of a request that came before its client session made any request."""
        ...

    async def request(
        self, task_id: str, params: mt.CreateMessageRequestParams, ask: Ask, *,
        tool: str | None = None, cause: str | None = None, progress: Progress | None = None,
    ) -> Sampled:
        """Record, judge and (if allowed or approved) put ``params`` to the client."""
        ...
