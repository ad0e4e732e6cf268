"""Everything but tools, forwarded: resources, prompts, completions, logging, roots.

Each request goes to the client session's own upstream session (``sessions``) and
its answer comes back as the upstream gave it (an upstream error too, with its code);
whatever the upstream sends meanwhile (log lines, resource updates) rides the
request's stream (``peer``). A method the upstream does not offer is not offered
either: the proxy advertises exactly the upstream's capabilities (``advertised``), and
answers "Method not found" for the rest, as the upstream would.

Nothing here is recorded in the ledger: reading a resource, getting a prompt or
completing an argument changes nothing upstream. What carries risk is judged first
(``policy``): a resource's URI, a prompt's name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import mcp.types as mt
from mcp import ClientSession
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND

from agent_gate.errors import UpstreamUnavailable
from agent_gate.integrations.mcp.sessions import UpstreamSessions, made_for
from agent_gate.policy.mcp_rules import (
    McpDecision,
    McpPolicy,
    McpVerdict,
    judge_prompt,
    judge_resource,
)

__all__ = ["Capabilities", "Rules", "advertised", "denied", "install"]

Rules = Callable[[], McpPolicy | None]
"""The policy's ``mcp`` section (empty when the file has none: resources and sampling
denied); None when the proxy runs without a policy file (everything open, as tools)."""

Capabilities = Callable[[], mt.ServerCapabilities | None]
"""The upstream's capabilities as last read (None before it was first reached)."""

Send = Callable[[ClientSession, Any, ServerRequestContext[Any, Any]], Awaitable[Any]]

Check = Callable[[], Awaitable[None]]
"""Waits for the proxy's first connection to its upstream; raises if it cannot serve."""


def advertised(upstream: mt.ServerCapabilities | None) -> mt.ServerCapabilities:
    """What the proxy says it offers: the upstream's features, each as far as the
    upstream has it. Tools always, with ``listChanged``: the proxy tells its clients
    when the tools it offers change (the upstream's list, or a re-read after a restart)."""
    up = upstream or mt.ServerCapabilities()
    return mt.ServerCapabilities(
        tools=mt.ToolsCapability(list_changed=True),
        resources=mt.ResourcesCapability(
            subscribe=bool(up.resources.subscribe),
            list_changed=bool(up.resources.list_changed),
        ) if up.resources is not None else None,
        prompts=mt.PromptsCapability(list_changed=bool(up.prompts.list_changed))
        if up.prompts is not None else None,
        logging=mt.LoggingCapability() if up.logging is not None else None,
        completions=mt.CompletionsCapability() if up.completions is not None else None,
    )


def install(server: Server[Any], sessions: UpstreamSessions, check: Check,
            capabilities: Capabilities, rules: Rules) -> None:
    """Register on ``server`` a handler for each method forwarded to the upstream, each
    judged first by the policy's ``mcp`` section (``rules``)."""

    def resource(uri: str) -> McpDecision | None:
        section = rules()
        return None if section is None else judge_resource(section, uri)

    def prompt(name: str) -> McpDecision | None:
        section = rules()
        return None if section is None else judge_prompt(section, name)

    def guard(method: str, params: Any) -> McpDecision | None:
        """Refused before it is sent (an MCP error with the rule id), or the decision."""
        if method in ("resources/read", "resources/subscribe"):
            decision = resource(str(params.uri))
        elif method == "prompts/get":
            decision = prompt(params.name)
        else:
            return None
        if decision is not None and not decision.allowed:
            raise denied(decision)
        return decision

    def shown(method: str, result: Any, decision: McpDecision | None) -> Any:
        """What of the upstream's answer the client may see."""
        if method == "resources/list":
            kept = [r for r in result.resources if (d := resource(str(r.uri))) is None
                    or d.allowed]
            return result.model_copy(update={"resources": kept})
        if method == "prompts/list":
            kept = [p for p in result.prompts if (d := prompt(p.name)) is None or d.allowed]
            return result.model_copy(update={"prompts": kept})
        if method == "resources/read" and decision is not None and (
                decision.verdict is McpVerdict.REDACT):
            return result.model_copy(update={"contents": [
                _stand_in(c, decision.rule_id) for c in result.contents]})
        if method == "prompts/get":
            for message in result.messages:  # an embedded resource is judged as one
                content = message.content
                if isinstance(content, mt.EmbeddedResource):
                    d = resource(str(content.resource.uri))
                    if d is not None and d.verdict is not McpVerdict.ALLOW:
                        raise denied(d)
        return result

    async def upstream(ctx: ServerRequestContext[Any, Any], feature: str) -> ClientSession:
        await check()
        caps = capabilities()
        if caps is None or getattr(caps, feature, None) is None:
            raise MCPError(METHOD_NOT_FOUND, "Method not found", ctx.method)
        try:
            made = await sessions.of(ctx)
        except UpstreamUnavailable as exc:
            raise _unavailable(str(exc)) from None
        session = made.link.session
        if session is None:
            raise _unavailable(made.link.why_down)
        return session

    def forwarding(
        method: str, feature: str, send: Send,
    ) -> Callable[[ServerRequestContext[Any, Any], Any], Awaitable[Any]]:
        async def handle(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
            session = await upstream(ctx, feature)
            decision = guard(method, params)
            made = await sessions.of(ctx)
            with made.peer.serving(ctx):
                try:
                    return shown(method, await send(session, params, ctx), decision)
                except MCPError:
                    raise  # the upstream's own answer, or the SDK's "connection closed"
                except (OSError, ValueError, RuntimeError) as exc:
                    raise _unavailable(type(exc).__name__) from None
        return handle

    def request(method: str, result: type[Any], params_type: type[Any]) -> Send:
        """Send ``method`` with the client's params as they came, but for its progress
        token: the upstream gets the proxy's own, whose reports go to this request."""
        async def send(session: ClientSession, params: Any,
                       ctx: ServerRequestContext[Any, Any]) -> Any:
            dumped = params.model_dump(by_alias=True, mode="json", exclude_none=True)
            meta = dumped.get("_meta")
            token = meta.pop("progressToken", None) if isinstance(meta, dict) else None
            if isinstance(meta, dict) and not meta:
                del dumped["_meta"]
            typed = params_type.model_validate(dumped, by_name=False) if dumped else None
            request_type = _REQUESTS[method]
            message = request_type(params=typed) if typed is not None else request_type()
            progress = ctx.session.report_progress if token is not None else None
            return await session.send_request(message, result, progress_callback=progress)
        return send

    for method, feature, params_type, result in _FORWARDED:
        server.add_request_handler(
            method, params_type,
            forwarding(method, feature, request(method, result, params_type)))

    async def roots_changed(ctx: ServerRequestContext[Any, Any], params: Any) -> None:
        """The client's roots changed: its upstream session is told (if it has one)."""
        made = sessions.shared or made_for(ctx)
        session = made.link.session if made is not None else None
        if session is not None:
            await session.send_notification(mt.RootsListChangedNotification())

    server.add_notification_handler("notifications/roots/list_changed",
                                    mt.NotificationParams, roots_changed)


_FORWARDED: tuple[tuple[str, str, type[Any], type[Any]], ...] = (
    ("resources/list", "resources", mt.PaginatedRequestParams, mt.ListResourcesResult),
    ("resources/templates/list", "resources", mt.PaginatedRequestParams,
     mt.ListResourceTemplatesResult),
    ("resources/read", "resources", mt.ReadResourceRequestParams, mt.ReadResourceResult),
    ("resources/subscribe", "resources", mt.SubscribeRequestParams, mt.EmptyResult),
    ("resources/unsubscribe", "resources", mt.UnsubscribeRequestParams, mt.EmptyResult),
    ("prompts/list", "prompts", mt.PaginatedRequestParams, mt.ListPromptsResult),
    ("prompts/get", "prompts", mt.GetPromptRequestParams, mt.GetPromptResult),
    ("completion/complete", "completions", mt.CompleteRequestParams, mt.CompleteResult),
    ("logging/setLevel", "logging", mt.SetLevelRequestParams, mt.EmptyResult),
)
"""(method, the capability that offers it, its params, its result)."""

_REQUESTS: dict[str, type[Any]] = {
    "resources/list": mt.ListResourcesRequest,
    "resources/templates/list": mt.ListResourceTemplatesRequest,
    "resources/read": mt.ReadResourceRequest,
    "resources/subscribe": mt.SubscribeRequest,
    "resources/unsubscribe": mt.UnsubscribeRequest,
    "prompts/list": mt.ListPromptsRequest,
    "prompts/get": mt.GetPromptRequest,
    "completion/complete": mt.CompleteRequest,
    "logging/setLevel": mt.SetLevelRequest,
}


def denied(decision: McpDecision) -> MCPError:
    """A request the policy refuses, as the MCP error a client reads: the rule id in
    the message and in ``data`` (``agent-gate/rule-ids``), as a denied tool call has."""
    why = f": {decision.reason}" if decision.reason else ""
    return MCPError(INVALID_REQUEST, f"agent-gate: denied by policy rule "
                    f"{decision.rule_id}{why}", {"agent-gate/rule-ids": [decision.rule_id]})


def _stand_in(content: Any, rule_id: str) -> mt.TextResourceContents:
    """A resource's contents as the client sees a redacted one: its size and a hash."""
    raw = content.text.encode() if isinstance(content, mt.TextResourceContents) else (
        content.blob.encode())
    digest = hashlib.sha256(raw).hexdigest()[:16]
    return mt.TextResourceContents(
        uri=content.uri, mime_type="text/plain",
        text=f"[agent-gate: redacted by policy rule {rule_id}: {len(raw)} bytes, "
             f"sha256 {digest}...]")


def _unavailable(why: str) -> MCPError:
    return MCPError(INTERNAL_ERROR, f"agent-gate mcp proxy: upstream unavailable, retry ({why})")
