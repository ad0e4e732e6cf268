"""A real MCP server with every feature a proxy must forward (the SDK's low-level server).

Resources (text, binary, a template, subscriptions with update notifications),
prompts, completions, logging, and tools that use the client through the server:
progress, sampling, elicitation, roots. ``whoami`` says which upstream session
answers (process id and, over HTTP, the session id), so a test sees whether two
clients share one. ``python mcp_features.py`` serves stdio; ``--http PORT``
Streamable HTTP on loopback; ``--bad-tool`` lists a malformed tool (no inputSchema)
beside the good ones; ``--bare`` offers tools only; ``--late-get`` (with ``--http``)
answers a session's standalone GET stream 1.5 s late.
"""

from __future__ import annotations

import base64
import os
import sys
import warnings
from typing import Any

import anyio
import mcp.types as mt
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import EventMessage, EventStore

warnings.simplefilter("ignore")  # logging and roots are deprecated in a later revision
BARE = "--bare" in sys.argv
BAD = "--bad-tool" in sys.argv
subscribed: set[tuple[str, str]] = set()
"""(session, uri): over HTTP one process serves every session, each subscribes alone."""
level: list[str] = ["info"]

TOOLS = [
    mt.Tool(name="whoami", input_schema={"type": "object"},
            annotations=mt.ToolAnnotations(read_only_hint=True)),
    mt.Tool(name="progress", input_schema={"type": "object"},
            annotations=mt.ToolAnnotations(read_only_hint=True)),
    mt.Tool(name="log", input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
            annotations=mt.ToolAnnotations(read_only_hint=True)),
    mt.Tool(name="sample", input_schema={"type": "object",
                                         "properties": {"prompt": {"type": "string"}}},
            annotations=mt.ToolAnnotations(read_only_hint=False, destructive_hint=False)),
    mt.Tool(name="elicit", input_schema={"type": "object"},
            annotations=mt.ToolAnnotations(read_only_hint=False, destructive_hint=False)),
    mt.Tool(name="elicit_aside", input_schema={"type": "object"},
            annotations=mt.ToolAnnotations(read_only_hint=False, destructive_hint=False)),
    mt.Tool(name="roots", input_schema={"type": "object"},
            annotations=mt.ToolAnnotations(read_only_hint=True)),
    mt.Tool(name="touch", input_schema={"type": "object",
                                        "properties": {"uri": {"type": "string"}}},
            annotations=mt.ToolAnnotations(read_only_hint=True)),
    mt.Tool(name="note", input_schema={"type": "object",
                                       "properties": {"text": {"type": "string"}}},
            annotations=mt.ToolAnnotations(read_only_hint=False, destructive_hint=False)),
    mt.Tool(name="reconnect", input_schema={"type": "object"},
            annotations=mt.ToolAnnotations(read_only_hint=True)),
    mt.Tool(name="slow", input_schema={"type": "object",
                                       "properties": {"marker": {"type": "string"}}},
            annotations=mt.ToolAnnotations(read_only_hint=False, destructive_hint=False)),
]


def _session(ctx: Any) -> str:
    """The Streamable HTTP session id a request came in, "-" over stdio."""
    headers = getattr(ctx.request, "headers", None)
    return (headers.get("mcp-session-id") if headers is not None else None) or "-"


def _text(text: str) -> mt.CallToolResult:
    return mt.CallToolResult(content=[mt.TextContent(type="text", text=text)])


async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
    return mt.ListToolsResult(tools=TOOLS)


async def malformed(ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
    """With ``--bad-tool``: a tools/list with one entry that is not a tool. A middleware
    that answers itself is not validated by the SDK (a handler's result would be)."""
    if ctx.method != "tools/list":
        return await call_next(ctx)
    good = [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in TOOLS]
    return {"tools": [*good, {"name": "broken", "description": "no inputSchema"}]}


async def call_tool(ctx: ServerRequestContext[Any, Any],
                    params: mt.CallToolRequestParams) -> mt.CallToolResult:
    args = params.arguments or {}
    session, rid = ctx.session, ctx.request_id
    if params.name == "whoami":
        return _text(f"{os.getpid()}:{_session(ctx)}")
    if params.name == "progress":
        token = ctx.meta.get("progressToken") if ctx.meta is not None else None
        for done in (1, 2, 3):
            await session.report_progress(done, 3, f"step {done}")
        return _text(f"token seen upstream: {token!r}")
    if params.name == "log":
        await session.send_log_message("warning", args.get("text", ""), logger="features",
                                       related_request_id=rid)
        return _text("logged")
    if params.name == "sample":
        answer = await session.create_message(
            messages=[mt.SamplingMessage(role="user", content=mt.TextContent(
                type="text", text=str(args.get("prompt", ""))))],
            max_tokens=50, related_request_id=rid)
        content = answer.content
        said = content.text if isinstance(content, mt.TextContent) else repr(content)
        return _text(f"sampled: {said}")
    if params.name == "elicit":
        got = await session.elicit_form(
            "your name?", {"type": "object", "properties": {"name": {"type": "string"}}},
            related_request_id=rid)
        return _text(f"elicited: {got.action} {got.content}")
    if params.name == "elicit_aside":  # on the standalone stream, as some servers ask
        got = await session.elicit_form(
            "your name?", {"type": "object", "properties": {"name": {"type": "string"}}})
        return _text(f"elicited: {got.action} {got.content}")
    if params.name == "roots":
        roots = await session.list_roots()
        return _text("roots: " + ",".join(str(r.uri) for r in roots.roots))
    if params.name == "touch":
        uri = str(args.get("uri"))
        if (_session(ctx), uri) in subscribed:
            await session.send_resource_updated(uri)
        return _text(f"touched {uri}")
    if params.name == "note":
        with open(os.environ["MCP_UPSTREAM_LOG"], "a", encoding="utf-8") as f:
            f.write(f"note:{args.get('text')}\n")
        return _text("noted")
    if params.name == "reconnect":  # SEP-1699: the stream closed mid-call, resumed
        if ctx.close_sse_stream is not None:
            await ctx.close_sse_stream()
        await anyio.sleep(0.1)
        return _text("reconnected")
    if params.name == "slow":
        log = os.environ.get("MCP_UPSTREAM_LOG")
        if log:
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"slow:{args.get('marker')}\n")
        await anyio.sleep(60)
        return _text("slow done")
    raise ValueError(f"unknown tool {params.name}")


async def list_resources(ctx: Any, params: Any) -> mt.ListResourcesResult:
    return mt.ListResourcesResult(resources=[
        mt.Resource(uri="docs://readme", name="readme", mime_type="text/plain"),
        mt.Resource(uri="docs://logo", name="logo", mime_type="image/png"),
        mt.Resource(uri="secret://keys", name="keys", mime_type="text/plain"),
    ])


async def list_templates(ctx: Any, params: Any) -> mt.ListResourceTemplatesResult:
    return mt.ListResourceTemplatesResult(resource_templates=[
        mt.ResourceTemplate(uri_template="docs://pages/{page}", name="page")])


async def read_resource(ctx: Any, params: mt.ReadResourceRequestParams) -> mt.ReadResourceResult:
    uri = str(params.uri)
    if uri == "docs://logo":
        return mt.ReadResourceResult(contents=[mt.BlobResourceContents(
            uri=uri, mime_type="image/png", blob=base64.b64encode(b"\x89PNG\r\n").decode())])
    if uri in ("docs://readme", "secret://keys") or uri.startswith("docs://pages/"):
        return mt.ReadResourceResult(contents=[mt.TextResourceContents(
            uri=uri, mime_type="text/plain", text=f"contents of {uri}")])
    raise ValueError(f"no resource {uri}")


async def subscribe(ctx: Any, params: mt.SubscribeRequestParams) -> mt.EmptyResult:
    subscribed.add((_session(ctx), str(params.uri)))
    return mt.EmptyResult()


async def unsubscribe(ctx: Any, params: mt.UnsubscribeRequestParams) -> mt.EmptyResult:
    subscribed.discard((_session(ctx), str(params.uri)))
    return mt.EmptyResult()


async def list_prompts(ctx: Any, params: Any) -> mt.ListPromptsResult:
    return mt.ListPromptsResult(prompts=[
        mt.Prompt(name="greet", arguments=[mt.PromptArgument(name="who", required=True)])])


async def get_prompt(ctx: Any, params: mt.GetPromptRequestParams) -> mt.GetPromptResult:
    who = (params.arguments or {}).get("who", "nobody")
    return mt.GetPromptResult(messages=[mt.PromptMessage(
        role="user", content=mt.TextContent(type="text", text=f"hello {who}"))])


async def complete(ctx: Any, params: mt.CompleteRequestParams) -> mt.CompleteResult:
    prefix = params.argument.value
    names = [n for n in ("ana", "andrei", "bob") if n.startswith(prefix)]
    return mt.CompleteResult(completion=mt.Completion(values=names, total=len(names)))


async def set_level(ctx: Any, params: mt.SetLevelRequestParams) -> mt.EmptyResult:
    level[0] = params.level
    return mt.EmptyResult()


BACKGROUND: list[Any] = []
"""The task group of what the server does on its own (stdio only)."""


async def roots_changed(ctx: Any, params: Any) -> None:
    """The client says its roots changed: the server asks it for a sampling of its own
    accord, outside any request (answered in the side-effect log)."""
    if BACKGROUND:
        BACKGROUND[0].start_soon(_sample_unasked, ctx.session)


async def _sample_unasked(session: Any) -> None:
    log = os.environ.get("MCP_UPSTREAM_LOG")
    try:
        answer = await session.create_message(
            messages=[mt.SamplingMessage(role="user", content=mt.TextContent(
                type="text", text="unasked"))], max_tokens=10)
        content = answer.content
        line = "sampled-unasked:" + (content.text if isinstance(content, mt.TextContent)
                                     else repr(content))
    except Exception as exc:  # the proxy's or the client's refusal
        line = f"sampled-unasked-error:{getattr(exc, 'message', None) or exc}"
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(line.replace("\n", " ") + "\n")


def build() -> Server[Any]:
    server: Server[Any] = Server("features", on_list_tools=list_tools, on_call_tool=call_tool)
    server.add_notification_handler("notifications/roots/list_changed",  # type: ignore[arg-type]
                                    mt.NotificationParams, roots_changed)
    if BAD:
        server.middleware.append(malformed)
    if not BARE:
        for method, params_type, handler in (
            ("resources/list", mt.PaginatedRequestParams, list_resources),
            ("resources/templates/list", mt.PaginatedRequestParams, list_templates),
            ("resources/read", mt.ReadResourceRequestParams, read_resource),
            ("resources/subscribe", mt.SubscribeRequestParams, subscribe),
            ("resources/unsubscribe", mt.UnsubscribeRequestParams, unsubscribe),
            ("prompts/list", mt.PaginatedRequestParams, list_prompts),
            ("prompts/get", mt.GetPromptRequestParams, get_prompt),
            ("completion/complete", mt.CompleteRequestParams, complete),
            ("logging/setLevel", mt.SetLevelRequestParams, set_level),
        ):
            server.add_request_handler(method, params_type, handler)  # type: ignore[arg-type]
    return server


class Events(EventStore):
    """Every event kept in memory, so a stream closed mid-call can be resumed."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []

    async def store_event(self, stream_id: str, message: Any) -> str:
        event_id = str(len(self.events))
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: Any) -> str | None:
        ids = [e[0] for e in self.events]
        if last_event_id not in ids:
            return None
        stream = self.events[ids.index(last_event_id)][1]
        for event_id, stream_id, message in self.events[ids.index(last_event_id) + 1:]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


def _late_get(app: Any) -> Any:
    async def late(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            await anyio.sleep(1.5)
        await app(scope, receive, send)

    return late


async def main() -> None:
    server = build()
    if "--http" in sys.argv:
        import uvicorn

        port = int(sys.argv[sys.argv.index("--http") + 1])
        # A client is told to wait ten minutes before it resumes a closed stream.
        app = server.streamable_http_app(event_store=Events(), retry_interval=600_000)
        if "--late-get" in sys.argv:  # the standalone stream opens late, as under load
            app = _late_get(app)
        await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                            log_level="warning")).serve()
        return
    async with stdio_server() as (read, write), anyio.create_task_group() as tg:
        BACKGROUND.append(tg)
        await server.run(read, write, server.create_initialization_options())
        tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
