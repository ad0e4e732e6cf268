"""An MCP server's tools registered in a gate's registry, each dispatched to that server.

The upstream's ``tools/list`` is the one declaration: its ``inputSchema`` is the
schema the gate validates against, and its annotations give each tool's default
effect and idempotency. The annotations are hints from a server we do not
control, read as the MCP specification defines their defaults (a tool that says
nothing is destructive and not idempotent); whatever the policy file says about a
tool's ``effect`` or ``idempotency`` replaces the hint outright, in either
direction, because the operator who wrote the policy is trusted and the server is
not.

A call that reaches the upstream and comes back with a JSON-RPC error failed
there, definitely; so did one whose result has ``isError: true`` (the tool ran and
reported an error): both are recorded ``failed``, never re-run, with the error's
text as the ledger keeps any tool's error (bounded, argument values and redacted
fields scrubbed out: ``privacy.scrub``). The tool's own result travels on the
exception (``ErrorData.data``) so the request that ran it returns it unchanged.

What the SDK reports as an ``MCPError`` is not always the upstream's answer: a
connection that closed (``CONNECTION_CLOSED``) or a request that timed out
(``REQUEST_TIMEOUT``) is the SDK's own, and says nothing of whether the tool
ran. So each call's request is followed on the wire (``wire.Sent``), and:

- a request that never left (the upstream was down, the write to it failed, an
  HTTP connection could not be opened, the server no longer knew the session)
  raises ``OutcomeUnknown`` caused by ``UpstreamUnavailable`` (``undelivered``):
  the call goes ``in_doubt`` like any call whose outcome a tool cannot report (the
  one way out of ``executing``), and the proxy settles it ``not_applied`` at once,
  which makes it runnable again (``calls``);
- a request that was sent and then lost its connection, or timed out, or whose
  HTTP answer broke off, raises ``OutcomeUnknown``: ``in_doubt``, settled by
  ``agent-gate resolve``, never re-run blindly;
- a JSON-RPC error or an ``isError`` result the upstream sent is a sure answer:
  ``failed``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import mcp.types as mt
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, INTERNAL_ERROR, REQUEST_TIMEOUT

from agent_gate.errors import (
    OutcomeUnknown,
    ToolDefinitionError,
    UpstreamUnavailable,
    error_code,
)
from agent_gate.gate import Gate, current_call
from agent_gate.gate.mcp_approval import MCP_PREFIX
from agent_gate.integrations.mcp.link import Fixed, Link
from agent_gate.integrations.mcp.wire import IDEMPOTENCY_KEY_META, Sent
from agent_gate.tools import CallInfo, Effect, Idempotency

__all__ = ["IDEMPOTENCY_KEY_META", "Registered", "Route", "classes_of", "list_all",
           "not_delivered", "register_tools", "reported_result", "routed", "undelivered"]


RESERVED_PREFIX = MCP_PREFIX
"""An upstream tool whose name begins so is refused: the gate answers such names itself
(``gate.mcp_approval``), and the proxy records sampling requests under one
(``policy.mcp_rules.SAMPLING_TOOL``)."""

CALL_ID_FORWARD_META = "agent-gate/call-id"
"""The `_meta` key under which each upstream call carries its gate call id."""

TOOL_RESULT_DATA = "agent-gate/tool-result"
"""Where an ``isError`` result rides on the ``MCPError`` raised for it (``data``)."""


def classes_of(tool: mt.Tool, gate: Gate) -> tuple[Effect, Idempotency]:
    """The tool's effect and idempotency: the policy's word, else the annotations'."""
    hints = tool.annotations or mt.ToolAnnotations()
    if hints.read_only_hint:
        effect = Effect.READ
    elif hints.destructive_hint is False:
        effect = Effect.WRITE
    else:  # the specification's default: destructive
        effect = Effect.DESTRUCTIVE
    natural = bool(hints.idempotent_hint) or effect is Effect.READ
    idempotency = Idempotency.NATURAL if natural else Idempotency.NONE
    if gate.rules is not None:
        said = gate.rules.policy.tool_overrides(tool.name)
        effect = said.effect or effect
        idempotency = said.idempotency or idempotency
    return effect, idempotency


async def list_all(session: ClientSession) -> tuple[list[mt.Tool], tuple[tuple[str, str], ...]]:
    """Every tool the server lists, following its pagination cursor, and (name, why)
    for each entry that is not a tool at all (no ``inputSchema``, a name that is not a
    string...): those are left out, not fatal.

    The SDK's ``list_tools`` validates the page as a whole, so one malformed entry
    would fail the listing of every tool; the page is read raw here (the session's
    dispatcher and header stamp, which are not public API:
    ``tests/integrations/test_mcp_gateway.py`` fails if they change) and each
    entry validated on its own."""
    tools: list[mt.Tool] = []
    malformed: list[tuple[str, str]] = []
    cursor: str | None = None
    while True:
        data: dict[str, Any] = {"method": "tools/list"}
        if cursor:
            data["params"] = {"cursor": cursor}
        opts: dict[str, Any] = {}
        session._stamp(data, opts)  # type: ignore[arg-type]
        raw = await session._dispatcher.send_raw_request(  # type: ignore[attr-defined]
            "tools/list", data.get("params"), opts)
        entries = raw.get("tools") if isinstance(raw, dict) else None
        if not isinstance(entries, list):
            raise MCPError(INTERNAL_ERROR, "the upstream's tools/list result has no tools list")
        for index, entry in enumerate(entries):
            name = entry.get("name") if isinstance(entry, dict) else None
            try:
                tools.append(mt.Tool.model_validate(entry, by_name=False))
            except ValueError as exc:
                label = name if isinstance(name, str) else f"entry {index}"
                malformed.append((label, _first_problem(exc)))
        cursor = raw.get("nextCursor")
        if not isinstance(cursor, str) or not cursor:
            return tools, tuple(malformed)


def _first_problem(exc: ValueError) -> str:
    """What is wrong with a tool entry, by field, without its values."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "the entry"
        return f"not a valid tool ({where}: {first.get('type', 'invalid')})"
    return "not a valid tool"


UpstreamProgress = Callable[[float, float | None, str | None], Awaitable[None]]
"""Where the upstream's progress for one call goes: the client request it serves."""


@dataclass(frozen=True, slots=True)
class Route:
    """The upstream session a call is dispatched on, and where its progress goes.

    The gate's registry holds one dispatcher per tool, shared by every client
    session of the proxy; each client session has its own upstream session (its
    own ``Link``), so the request being served names it here (``routed``)."""

    link: Link | Fixed
    progress: UpstreamProgress | None = None
    degraded: Callable[[], str | None] | None = None
    """Why the upstream's answer may rest on input the client could not give (it
    asked for sampling, say, and the client has none): such a result is in doubt."""
    started: Callable[[CallInfo], None] | None = None
    """Told which gate call is sent, before it is (what the upstream asks meanwhile
    is audited on that call)."""


_ROUTE: ContextVar[Route | None] = ContextVar("agent_gate_mcp_route", default=None)


@contextmanager
def routed(route: Route) -> Iterator[None]:
    """Calls dispatched inside go to ``route``'s upstream session."""
    token = _ROUTE.set(route)
    try:
        yield
    finally:
        _ROUTE.reset(token)


def _dispatcher(default: Link | Fixed) -> Callable[[str, dict[str, Any]], Any]:
    async def dispatch(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        info = current_call()
        route = _ROUTE.get()
        link = route.link if route is not None else default
        progress = route.progress if route is not None else None
        if route is not None and route.started is not None:
            route.started(info)
        session, wire = link.session, link.wire
        if session is None:
            gone = not_delivered(f"call {info.call_id!r} was not sent: {_down(link)}")
            raise gone from gone.__cause__
        meta: dict[str, Any] = {
            IDEMPOTENCY_KEY_META: info.idempotency_key,
            CALL_ID_FORWARD_META: info.call_id,
        }
        if wire is not None:
            wire.expect(info.idempotency_key)
        try:
            # Sent as a plain request: the SDK's call_tool would list the tools again
            # (strictly) and check the result against its output schema; the proxy
            # passes the upstream's answer on as it came.
            result = await session.send_request(
                mt.CallToolRequest(params=mt.CallToolRequestParams(
                    name=name, arguments=arguments, _meta=meta)),  # type: ignore[arg-type]
                mt.CallToolResult, progress_callback=progress,
            )
        except Exception as exc:
            sent = wire.take(info.idempotency_key) if wire is not None else Sent.SENT
            judged = _judged(exc, sent, info, link)
            why = route.degraded() if route is not None and route.degraded is not None else None
            if judged is exc and why is not None:  # its error may be the input it lacked
                raise OutcomeUnknown(f"call {info.call_id!r} ran, but {why}") from exc
            if judged is exc:
                raise
            raise judged from (judged.__cause__ if undelivered(judged) else exc)
        if wire is not None:
            wire.take(info.idempotency_key)
        why = route.degraded() if route is not None and route.degraded is not None else None
        if why is not None:
            raise OutcomeUnknown(f"call {info.call_id!r} ran, but {why}")
        dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        if result.is_error:
            raise MCPError(INTERNAL_ERROR, _error_text(result), {TOOL_RESULT_DATA: dumped})
        return dumped

    return dispatch


_NO_ANSWER = (CONNECTION_CLOSED, REQUEST_TIMEOUT)
"""``MCPError`` codes the SDK makes up itself when no answer came."""


def _judged(exc: Exception, sent: Sent, info: CallInfo, link: Link | Fixed) -> Exception:
    """What a call that raised ``exc`` after its request got as far as ``sent`` is:
    not delivered, in doubt, or (an error the upstream sent) failed."""
    if sent in (Sent.NOT_SENT, Sent.TURNED_AWAY):
        link.lost()
        return not_delivered(
            f"call {info.call_id!r} never reached the upstream ({error_code(exc)}); "
            "it did not run"
        )
    if isinstance(exc, MCPError) and exc.code not in _NO_ANSWER and sent is Sent.SENT:
        return exc  # the server answered with an error: it failed there, for sure
    link.lost()
    return OutcomeUnknown(
        f"the connection to the upstream broke during call {info.call_id!r} "
        f"({_what(exc)}); it may or may not have run"
    )


def not_delivered(text: str) -> OutcomeUnknown:
    """``OutcomeUnknown`` for a call whose request never left: the gate records it in
    doubt (a claimed call's only way out short of an answer), its cause says why."""
    exc = OutcomeUnknown(text)
    exc.__cause__ = UpstreamUnavailable(text)
    return exc


def undelivered(exc: BaseException | None) -> bool:
    """The call raised ``exc`` because its request never reached the upstream."""
    return isinstance(exc, OutcomeUnknown) and isinstance(exc.__cause__, UpstreamUnavailable)


def _what(exc: Exception) -> str:
    if isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT:
        return "no answer in time"
    if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
        return "connection closed"
    return error_code(exc)


def _down(link: Link | Fixed) -> str:
    return link.why_down if isinstance(link, Link) else "the session is closed"


def _error_text(result: mt.CallToolResult) -> str:
    """What the upstream said went wrong: its text content, else its structured content."""
    said = "\n".join(c.text for c in result.content if isinstance(c, mt.TextContent))
    if said:
        return said
    if result.structured_content:
        return json.dumps(result.structured_content, ensure_ascii=False, sort_keys=True)
    return "the tool reported an error and said nothing more"


def reported_result(exc: BaseException | None) -> dict[str, Any] | None:
    """The tool result an ``isError`` answer came with, from the exception that carried it."""
    if isinstance(exc, MCPError) and isinstance(exc.data, dict):
        result = exc.data.get(TOOL_RESULT_DATA)
        return result if isinstance(result, dict) else None
    return None


@dataclass(frozen=True, slots=True)
class Registered:
    """What registering an upstream's tools did: the tools added, and those refused."""

    added: tuple[str, ...]
    refused: tuple[tuple[str, str], ...]
    """(tool, why) for each tool whose schema or name the gate cannot use."""
    kept: tuple[str, ...] = ()
    """Tools registered earlier whose ``inputSchema`` the upstream has since changed:
    the gate keeps checking them against the schema it registered."""


def register_tools(
    gate: Gate,
    session: ClientSession | Link | Fixed,
    tools: Iterable[mt.Tool],
    dedupe: Mapping[str, Sequence[str]] | None = None,
) -> Registered:
    """Register each upstream tool not yet in ``gate.tools``, dispatched to ``session``.

    ``dedupe`` gives a tool the argument names its calls are deduplicated by (the
    gate's own per-tool dedupe key, ``ToolSpec.dedupe``). A tool the gate cannot
    check (its schema is not a JSON Schema for an object, a dedupe field its schema
    does not declare) is refused and left out: a call to it is then rejected as an
    unknown tool.

    A tool registered already is never redefined, even when the upstream now lists
    it with another ``inputSchema`` (``Registered.kept``): the calls the ledger holds
    were judged by the registered schema, and one sent again must be judged alike;
    a new schema is taken by a new gate (a proxy restart).

    ``session`` is the upstream's session, or the proxy's ``Link`` to it: its tools
    then reach whichever session the link holds when they run.
    """
    dispatch = _dispatcher(session if isinstance(session, Link | Fixed) else Fixed(session))
    added: list[str] = []
    refused: list[tuple[str, str]] = []
    kept: list[str] = []
    for tool in tools:
        if tool.name.startswith(RESERVED_PREFIX):
            refused.append((tool.name, f"names beginning {RESERVED_PREFIX!r} are agent-gate's "
                            "own (hosted MCP approvals, sampling requests)"))
            continue
        if tool.name in gate.tools:
            if dict(gate.tools[tool.name].spec.schema) != tool.input_schema:
                kept.append(tool.name)
            continue
        effect, idempotency = classes_of(tool, gate)
        spec = {
            "schema": tool.input_schema,
            "effect": effect,
            "idempotency": idempotency,
            "description": tool.description,
        }
        if dedupe and tool.name in dedupe:
            spec["dedupe"] = list(dedupe[tool.name])
        try:
            gate.tools.wrap(dispatch, {tool.name: spec})
        except ToolDefinitionError as exc:
            refused.append((tool.name, str(exc)))
            continue
        added.append(tool.name)
    return Registered(tuple(added), tuple(refused), tuple(kept))
