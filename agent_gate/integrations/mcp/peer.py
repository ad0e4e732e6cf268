"""One client session of the proxy as its upstream session sees it: where what the
upstream sends on its own goes.

Each client session of the proxy has its own upstream session (``sessions``), so
whatever that upstream session sends is for that client and no other: its log
messages, resource updates and list changes, and its requests for input (sampling,
elicitation, roots). ``ClientPeer`` delivers them to the client's connection, on the
stream of a request the client is waiting on when there is one (a Streamable HTTP
client that opened no standalone stream still reads it), else on the standalone
stream. Progress is not routed here: each forwarded request carries its own progress
callback, bound to the client request it serves, so a token never crosses requests.

A request for input that the client cannot answer (it did not declare the
capability, or has no channel for it) is answered with an error, as a server talking
to that client directly would get; the call that caused it is told (``Serving``):
its result was made without the input it asked for, so the gate records it in doubt,
never ``succeeded`` (a person settles it with ``agent-gate resolve``).

A sampling request is a call of its own in the ledger (``sampling``), in the task of
the client session it came on, during a tool call or outside any; the tool call it
served, if any, notes it on its own trail (``mcp_sampling``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import mcp.types as mt
from mcp.client.session import ClientRequestContext
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata

from agent_gate.integrations.mcp.protocol import Progress, Sampler
from agent_gate.policy.mcp_rules import McpPolicy, judge_sampling
from agent_gate.tools import CallInfo

__all__ = ["Audit", "ClientPeer", "Serving"]

Audit = Callable[[CallInfo, dict[str, Any]], Awaitable[None]]
"""Records, on a gate call, what its upstream asked of the client meanwhile."""

_FORWARDED = (mt.LoggingMessageNotification, mt.ResourceUpdatedNotification,
              mt.ResourceListChangedNotification, mt.PromptListChangedNotification)
"""Upstream notifications a client gets as they came (tools' list changes are the
proxy's own: it re-reads the tools first)."""


@dataclass(eq=False, slots=True)
class Serving:
    """One client request the proxy is forwarding: where the upstream's messages
    during it go, and the input the upstream asked for that the client could not give."""

    session: Any
    request_id: Any
    tool: str | None = None
    """The tool whose call this request is (None for any other request)."""
    refused: list[str] = field(default_factory=list)
    call: CallInfo | None = None
    """The gate call being sent upstream, once it is (``upstream.Route.started``)."""
    progress: Progress | None = None
    """Where a sampling request held for a person reports that it waits: the client's
    request, which would otherwise time out in silence."""

    def started(self, info: CallInfo) -> None:
        self.call = info

    def degraded(self) -> str | None:
        """Why the upstream's answer to this request may not be what it would have been."""
        if not self.refused:
            return None
        return ("the upstream asked the client for " + ", ".join(sorted(set(self.refused)))
                + ", which the client could not give; its result may rest on that")


class ClientPeer:
    """Delivers what one upstream session sends to the one client session it serves."""

    def __init__(self, rules: Callable[[], McpPolicy | None] = lambda: None,
                 audit: Audit | None = None, sampler: Sampler | None = None,
                 task: str | None = None) -> None:
        self.connection: Any | None = None
        self._serving: list[Serving] = []
        self.rules = rules
        """The policy's ``mcp`` section, which judges sampling requests (None: open)."""
        self.audit = audit
        """Records a sampling request on the gate call that caused it."""
        self.sampler = sampler
        """Records each sampling request as a call of its own (None: only forwarded)."""
        self.task = task
        """The task of this client session's calls, where its sampling requests go."""

    def attach(self, ctx: ServerRequestContext[Any, Any], task: str | None = None) -> None:
        """Know the client's connection (from any request of its session) and task."""
        if self.connection is None:
            self.connection = getattr(ctx.session, "_connection", None)
        if self.task is None:
            self.task = task

    @contextlib.contextmanager
    def serving(self, ctx: ServerRequestContext[Any, Any], tool: str | None = None,
                progress: Progress | None = None) -> Iterator[Serving]:
        """While the client waits on ``ctx``'s request, the upstream's messages ride it."""
        self.attach(ctx)
        entry = Serving(ctx.session, ctx.request_id, tool, progress=progress)
        self._serving.append(entry)
        try:
            yield entry
        finally:
            self._serving.remove(entry)

    @property
    def capabilities(self) -> mt.ClientCapabilities | None:
        return getattr(self.connection, "client_capabilities", None)

    async def on_message(self, message: Any) -> None:
        """An upstream notification: to the client, if it is one a client gets."""
        if not isinstance(message, _FORWARDED):
            return
        with contextlib.suppress(Exception):  # a client gone away: nothing to tell
            if self._serving:
                current = self._serving[-1]
                await current.session.send_notification(
                    message, related_request_id=current.request_id)
            elif self.connection is not None:
                data = message.model_dump(by_alias=True, mode="json", exclude_none=True)
                await self.connection.notify(data["method"], data.get("params"))

    async def sampling(
        self, context: ClientRequestContext, params: mt.CreateMessageRequestParams
    ) -> mt.CreateMessageResultWithTools | mt.ErrorData:
        """Recorded as a call of its own and judged by the policy's ``mcp.sampling``
        rules (the client pays for the model and the prompt is the upstream's): put to
        the client if allowed or approved, else refused with the rule id, and the call
        that caused it is in doubt (its result lacks what it asked)."""
        current = self._serving[-1] if self._serving else None
        tool = current.tool if current is not None else None

        async def ask() -> mt.CreateMessageResultWithTools | mt.ErrorData:
            return await self._ask(  # type: ignore[no-any-return]
                "sampling", mt.CreateMessageRequest(params=params),
                mt.CreateMessageResultWithTools)

        if self.sampler is None:  # nothing to record in (a bare proxy server): forwarded
            return await ask()
        cause = current.call if current is not None else None
        task = cause.task_id if cause is not None else self.task or self.sampler.own_task
        sampled = await self.sampler.request(
            task, params, ask, tool=tool,
            cause=cause.call_id if cause is not None else None,
            progress=current.progress if current is not None else None)
        if sampled.refused is not None:
            for entry in self._serving:
                entry.refused.append(sampled.refused)
        if self.audit is not None and cause is not None:
            section = self.rules()
            decision = judge_sampling(section, tool) if section is not None else None
            await self.audit(cause, {
                "request": "sampling/createMessage", "sampling_call": sampled.call_id,
                "state": sampled.state.value,
                "decision": decision.verdict.value if decision is not None else "allow",
                "rule_ids": [decision.rule_id] if decision is not None else [],
                "max_tokens": params.max_tokens, "messages": len(params.messages)})
        return sampled.answer

    async def elicitation(
        self, context: ClientRequestContext, params: mt.ElicitRequestParams
    ) -> mt.ElicitResult | mt.ErrorData:
        return await self._ask(  # type: ignore[return-value]
            "elicitation", mt.ElicitRequest(params=params), mt.ElicitResult)

    async def list_roots(self, context: ClientRequestContext) -> mt.ListRootsResult | mt.ErrorData:
        return await self._ask(  # type: ignore[return-value]
            "roots", mt.ListRootsRequest(), mt.ListRootsResult)

    async def _ask(self, what: str, request: Any, result_type: type[Any]) -> Any:
        """The client's own answer to the upstream's ``request``; an error the upstream
        reads as "not supported" when the client cannot answer it."""
        caps = self.capabilities
        able = caps is not None and getattr(caps, what, None) is not None
        current = self._serving[-1] if self._serving else None
        if not able or (current is None and self.connection is None):
            for entry in self._serving:
                entry.refused.append(what)
            return mt.ErrorData(code=mt.INVALID_REQUEST,
                                message=f"agent-gate: the client does not support {what}")
        try:
            if current is not None:
                return await current.session.send_request(
                    request, result_type,
                    metadata=ServerMessageMetadata(related_request_id=current.request_id))
            assert self.connection is not None
            data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
            raw = await self.connection.send_raw_request(data["method"], data.get("params"))
            return result_type.model_validate(raw, by_name=False)
        except MCPError as exc:  # the client's own answer: the upstream gets it as it came
            return exc.error
        except Exception as exc:  # no channel, gone, or an answer that is not one
            print(f"agent-gate mcp proxy: could not ask the client for {what} "
                  f"({type(exc).__name__})", file=sys.stderr)
            for entry in self._serving:
                entry.refused.append(what)
            return mt.ErrorData(code=mt.INTERNAL_ERROR,
                                message=f"agent-gate: the client could not be asked for {what}")
