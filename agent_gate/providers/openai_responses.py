"""OpenAI Responses API (``POST /v1/responses`` with ``stream: true``).

Correlation: a call is an output *item*. It is announced by
``response.output_item.added``; argument deltas name the item by ``item_id``
(the item's ``id``, not its ``call_id``). The call is complete only at
``response.output_item.done`` with item ``status: "completed"``, whose
``arguments`` are authoritative (some models stream no deltas at all).
``response.function_call_arguments.done`` comes earlier and is only a
cross-check: the item can still end ``incomplete``.

Items the platform runs itself (web search, file search, MCP, code
interpreter, image generation, a ``program`` of programmatic tool calling, a
``shell_call`` whose ``environment`` is a hosted container) are reported as
provider-executed. Items that carry a ``call_id`` but are neither function nor
custom tool calls (computer, apply-patch calls, a ``shell_call`` for a local
environment or naming none) expect the client to act in ways agent-gate does
not model; they are rejected rather than silently dropped. Items that carry a
call's *result* (``shell_call_output``, ``program_output``...) reuse that
call's ``call_id`` but ask nothing of the client: they start no call.

A function or custom tool call invoked by a program (``caller.type:
"program"``) keeps ``status: "in_progress"`` at its ``output_item.done``: the
program is suspended until the client sends the output back. Its arguments are
final there, so that ``done`` completes it; for every other call, a ``done``
whose status is not ``completed`` completes nothing.

A ``custom_tool_call`` naming no ``custom`` tool of the response's own ``tools``
list (echoed by ``response.created``), in a response that was given hosted tools,
is one of those tools at work, not the client's: xAI reports the searches its
``x_search`` tool runs (``x_keyword_search``, ``view_x_video``...) that way, then
goes on and completes. It is provider-executed. Without a hosted tool in that list
(or without the list) every custom call stays the client's, as an echo that left a
tool out must not turn a client call into one nobody runs.

An ``mcp_approval_request`` is not run by the platform until the client answers:
it is a call like a function call, named ``mcp:<server_label>:<name>``, with the
item's JSON ``arguments``, complete at its ``output_item.done``.

Every finished output item is also a piece of the assistant's turn
(``TurnPart``), sent back as it came: reasoning items with their ids and
encrypted content, messages, calls, hosted tools' items.

Every event carries a ``sequence_number``; it is the replay key, so an event
seen again after resuming with ``starting_after`` is recognised exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from agent_gate import _speedups
from agent_gate.providers import events as ev
from agent_gate.providers.base import ProviderAdapter, WireEvent, provider_error_code
from agent_gate.providers.events import MCP_APPROVAL

PROVIDER_EXECUTED_ITEMS = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
        "mcp_list_tools",
        "tool_search_call",
        "program",
    }
)
"""Item types the platform executes itself."""

MCP_APPROVAL_REQUEST = "mcp_approval_request"
"""A hosted MCP call that waits for the client's ``mcp_approval_response``: a call
the client decides (kind ``mcp_approval``, named ``mcp:<server_label>:<name>``,
identified by the item's id, which the response names as ``approval_request_id``)."""

HOSTED_SHELL_ENVIRONMENTS = frozenset({"container_reference", "container_auto"})
"""``shell_call.environment.type`` values meaning the platform's container runs it."""

# Provider-executed items recorded under their ``call_id`` rather than their item id:
# the id their output items and the calls a program makes (``caller.caller_id``) name,
# so that every announcement of one call, however its fields arrive, is one call.
_KEYED_BY_CALL_ID = frozenset({"shell_call", "program"})

_CALL_KINDS = {"function_call": "function", "custom_tool_call": "custom"}
_CLIENT_TOOL_TYPES = frozenset({"function", "custom"})  # the tools the client runs itself
_FUNCTION_DELTA = "response.function_call_arguments.delta"
_CUSTOM_DELTA = "response.custom_tool_call_input.delta"

# Informational event families: known, carry nothing the accumulator needs.
_INFORMATIONAL_PREFIXES = (
    "response.created",
    "response.in_progress",
    "response.queued",
    "response.content_part.",
    "response.output_text.done",
    "response.output_text.annotation",
    "response.refusal.",
    "response.reasoning",
    "response.web_search_call.",
    "response.file_search_call.",
    "response.code_interpreter_call",
    "response.image_generation_call.",
    "response.mcp_",
    "response.audio",
    # Hosted shell and apply-patch progress (commands, output, diffs): the final
    # item says what ran; the fragments are the server working, so progress.
    "response.shell_call",
    "response.apply_patch_call",
)


class _ItemState(Enum):
    STREAMING = "streaming"
    DONE = "done"


@dataclass(slots=True)
class _Item:
    call_id: str
    kind: str
    state: _ItemState


def _delta_decoder() -> Callable[[str], Any] | None:
    """msgspec's decoder of exactly the fields ``hot_delta`` reads from an argument
    delta, typed: ``type``, ``item_id`` and ``delta`` as strings, and the
    ``sequence_number`` the replay guard keys the event by as an integer (msgspec
    refuses ``1.0``, ``true`` and integers beyond 64 bits there, so the event then
    takes the dict, whose answer is the reference's). Unknown fields
    (``output_index``, ``obfuscation``, ``logprobs``) are skipped, still checked to be
    well-formed JSON. Three strings and an int instead of a six-key dict, and
    attributes instead of ``dict.get``: the Responses delta is the longest event per
    argument byte of the four protocols. None without msgspec or with
    AGENT_GATE_PURE_PYTHON=1 (then every event is decoded to a dict)."""
    ms = _speedups.msgspec
    if ms is None:
        return None
    delta = ms.defstruct(
        "HotResponsesDelta",
        [("type", str), ("item_id", str), ("delta", str), ("sequence_number", int)],
    )
    return ms.json.Decoder(delta).decode  # type: ignore[no-any-return]


class OpenAIResponsesAdapter(ProviderAdapter):
    """State machine for one Responses stream."""

    name = "openai-responses"
    sequence_field = "sequence_number"
    hot_decode = _delta_decoder()
    # Function-call argument deltas only: a text delta (same fields) would decode
    # typed, be declined, and be decoded again; custom-tool deltas take the dict.
    hot_marker = '_arguments.delta"'

    def __init__(self) -> None:
        self._items: dict[str, _Item] = {}
        self._custom_tools: frozenset[str] | None = None  # None: no hosted tool declared
        self._server_items: set[str] = set()  # item ids of the provider's custom calls

    def hot_delta(self, data: Mapping[str, Any], sse_type: str) -> tuple[str, str] | None:
        etype = data.get("type")
        if etype != _FUNCTION_DELTA and etype != _CUSTOM_DELTA:
            return None
        if sse_type != "message" and sse_type != etype:
            return None
        item_id = data.get("item_id")
        delta = data.get("delta")
        if type(item_id) is not str or type(delta) is not str or not delta:
            return None
        item = self._items.get(item_id)
        if item is None or item.state is not _ItemState.STREAMING:
            return None
        return item.call_id, delta

    def hot_fragment(self, event: Any, sse_type: str) -> tuple[str, str] | None:
        # ``hot_delta``'s checks in its order, on the typed delta: the types the
        # decoder required (three strings) are not checked again.
        etype = event.type
        if etype != _FUNCTION_DELTA and etype != _CUSTOM_DELTA:
            return None
        if sse_type != "message" and sse_type != etype:
            return None
        delta = event.delta
        if not delta:
            return None
        item = self._items.get(event.item_id)
        if item is None or item.state is not _ItemState.STREAMING:
            return None
        return item.call_id, delta

    def translate_payload(self, wire: WireEvent, index: int) -> list[ev.StreamEvent]:
        etype = self.event_type(wire, index)
        data = wire.data
        if etype == "response.output_item.added":
            return self._item_added(data, index)
        if etype == "response.output_item.done":
            return self._item_done(data, index)
        if etype in (_FUNCTION_DELTA, _CUSTOM_DELTA):
            return self._delta(data, index, etype)
        if etype == "response.function_call_arguments.done":
            return self._snapshot(data, "arguments", index, etype)
        if etype == "response.custom_tool_call_input.done":
            return self._snapshot(data, "input", index, etype)
        if etype == "response.created":
            self._custom_tools = _declared_custom_tools(data)
            return []
        if etype == "response.output_text.delta":
            return [ev.TextDelta(self.field_str(data, "delta", index, etype))]
        if etype == "response.completed":
            return [ev.ResponseCompleted()]
        if etype == "response.incomplete":
            response = self.field_map(data, "response", index, etype)
            details = response.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, Mapping) else None
            return [
                ev.ResponseIncomplete(reason if isinstance(reason, str) and reason else "unknown")
            ]
        if etype == "response.failed":
            response = self.field_map(data, "response", index, etype)
            return [ev.ResponseFailed(provider_error_code(response.get("error")))]
        if etype == "error":
            nested = data.get("error")
            error = nested if isinstance(nested, Mapping) else data
            return [ev.ResponseFailed(provider_error_code(error))]
        if etype.startswith(_INFORMATIONAL_PREFIXES):
            return []
        return [ev.UnknownEvent(etype)]

    def _item_added(self, data: Mapping[str, Any], index: int) -> list[ev.StreamEvent]:
        where = "response.output_item.added"
        item = self.field_map(data, "item", index, where)
        output_index = self.field_int(data, "output_index", index, where)
        return self._announce(item, output_index, index, where)

    def _announce(
        self, item: Mapping[str, Any], output_index: int, index: int, where: str
    ) -> list[ev.StreamEvent]:
        itype = self.field_str(item, "type", index, where)
        kind = _CALL_KINDS.get(itype)
        if kind is not None and self._provider_custom_call(item, index, where):
            call_id = self.field_str(item, "call_id", index, where)
            name = self.field_str(item, "name", index, where)
            self._server_items.add(self.optional_str(item, "id", index, where) or call_id)
            return [ev.ProviderToolCall(call_id, name, itype, output_index)]
        if kind is not None:
            call_id = self.field_str(item, "call_id", index, where)
            name = self.field_str(item, "name", index, where)
            item_id = self.optional_str(item, "id", index, where) or call_id
            out: list[ev.StreamEvent] = [ev.ToolCallStarted(call_id, name, output_index, kind)]
            known = self._items.get(item_id)
            if known is None:
                self._items[item_id] = _Item(call_id, kind, _ItemState.STREAMING)
            elif known.call_id != call_id:
                out.append(ev.StreamAnomaly("item_id_reused", (known.call_id, call_id)))
            return out
        if itype == MCP_APPROVAL_REQUEST:
            return self._approval_request(item, output_index, index, where)
        if itype in PROVIDER_EXECUTED_ITEMS or _hosted_shell(item):
            if itype in _KEYED_BY_CALL_ID:
                key = self.field_str(item, "call_id", index, where)
            else:
                key = self.field_str(item, "id", index, where)
            label = self.optional_str(item, "name", index, where) or itype
            return [ev.ProviderToolCall(key, label, itype, output_index)]
        if itype.endswith("_output"):
            return []  # a call's result (it reuses the call's call_id): no call to start
        other_call_id = item.get("call_id")
        if isinstance(other_call_id, str) and other_call_id:
            # A client-side call of a kind agent-gate cannot run: never drop it silently.
            label = self.optional_str(item, "name", index, where) or itype
            return [
                ev.ToolCallStarted(other_call_id, label, output_index, itype),
                ev.StreamAnomaly("unsupported_call_type", (other_call_id,)),
            ]
        return []

    def _approval_request(
        self, item: Mapping[str, Any], output_index: int, index: int, where: str
    ) -> list[ev.StreamEvent]:
        request_id = self.field_str(item, "id", index, where)
        label = self.optional_str(item, "server_label", index, where)
        tool = self.optional_str(item, "name", index, where)
        if not label or not tool:
            return [
                ev.ToolCallStarted(request_id, MCP_APPROVAL_REQUEST, output_index, MCP_APPROVAL),
                ev.StreamAnomaly("mcp_approval_without_name", (request_id,)),
            ]
        name = f"mcp:{label}:{tool}"
        return [ev.ToolCallStarted(request_id, name, output_index, MCP_APPROVAL)]

    def _item_done(self, data: Mapping[str, Any], index: int) -> list[ev.StreamEvent]:
        where = "response.output_item.done"
        item = self.field_map(data, "item", index, where)
        output_index = self.field_int(data, "output_index", index, where)
        out = self._item_finished(item, output_index, index, where)
        call_id = None if self._provider_custom_call(item, index, where) else _turn_call_id(item)
        # A client call's argument text is the call's; a hosted tool's item (xAI's
        # provider-executed custom call) keeps its input, nothing else restores it.
        kept = _turn_item(item) if call_id is not None else item
        return [ev.TurnPart(output_index, kept, call_id), *out]

    def _item_finished(
        self, item: Mapping[str, Any], output_index: int, index: int, where: str
    ) -> list[ev.StreamEvent]:
        itype = self.field_str(item, "type", index, where)
        kind = _CALL_KINDS.get(itype)
        if itype == MCP_APPROVAL_REQUEST:
            out = self._announce(item, output_index, index, where)
            arguments = self.optional_str(item, "arguments", index, where)
            request_id = self.field_str(item, "id", index, where)
            if arguments is None:
                return [*out, ev.StreamAnomaly("mcp_approval_without_arguments", (request_id,))]
            return [*out, ev.ToolCallArgumentsDone(request_id, arguments)]
        if kind is None or self._provider_custom_call(item, index, where):
            # Provider-executed and unsupported items: announcing again is idempotent.
            return self._announce(item, output_index, index, where)
        out = self._announce(item, output_index, index, where)
        call_id = self.field_str(item, "call_id", index, where)
        item_id = self.optional_str(item, "id", index, where) or call_id
        self._items[item_id].state = _ItemState.DONE
        status = item.get("status")
        if status == "in_progress" and _program_invoked(item):
            status = "completed"  # the program waits for this call: its arguments are final
        if kind == "function":
            if status != "completed":
                # Leave the call open: the response's terminal says why it ended.
                return out
            out.append(
                ev.ToolCallArgumentsDone(call_id, self.field_str(item, "arguments", index, where))
            )
            return out
        # custom_tool_call: the SDK type has no status; when present it must say completed.
        if status is not None and status != "completed":
            return out
        out.append(ev.ToolCallArgumentsDone(call_id, self.field_str(item, "input", index, where)))
        return out

    def _delta(self, data: Mapping[str, Any], index: int, where: str) -> list[ev.StreamEvent]:
        item_id = self.field_str(data, "item_id", index, where)
        delta = self.field_str(data, "delta", index, where)
        if item_id in self._server_items:
            return []
        item = self._items.get(item_id)
        if item is None:
            return [ev.StreamAnomaly("delta_for_unknown_call")]
        if item.state is _ItemState.DONE:
            return [ev.StreamAnomaly("delta_after_completion", (item.call_id,))]
        return [ev.ToolCallArgumentsDelta(item.call_id, delta)] if delta else []

    def _snapshot(
        self, data: Mapping[str, Any], key: str, index: int, where: str
    ) -> list[ev.StreamEvent]:
        item_id = self.field_str(data, "item_id", index, where)
        text = self.field_str(data, key, index, where)
        if item_id in self._server_items:
            return []
        item = self._items.get(item_id)
        if item is None:
            return [ev.StreamAnomaly("snapshot_for_unknown_call")]
        return [ev.ToolCallArgumentsSnapshot(item.call_id, text)]

    def _provider_custom_call(self, item: Mapping[str, Any], index: int, where: str) -> bool:
        """A custom tool call the provider made with a tool the client never declared."""
        if item.get("type") != "custom_tool_call" or self._custom_tools is None:
            return False
        return self.field_str(item, "name", index, where) not in self._custom_tools


def _declared_custom_tools(data: Mapping[str, Any]) -> frozenset[str] | None:
    """The names of the ``custom`` tools ``response.created`` echoes, or None when it
    echoes no hosted tool (nothing then says a custom call is not the client's)."""
    response = data.get("response")
    tools = response.get("tools") if isinstance(response, Mapping) else None
    if not isinstance(tools, list) or not any(
        isinstance(tool, Mapping) and tool.get("type") not in _CLIENT_TOOL_TYPES
        for tool in tools
    ):
        return None
    return frozenset(
        tool["name"]
        for tool in tools
        if isinstance(tool, Mapping) and tool.get("type") == "custom"
        and isinstance(tool.get("name"), str)
    )


_CALL_TEXT = {"function_call": "arguments", "custom_tool_call": "input"}


def _turn_item(item: Mapping[str, Any]) -> Mapping[str, Any]:
    """An output item as the turn keeps it: a client call without its argument text,
    which the call itself holds (``ToolCall.raw_arguments``, the same text: the
    accumulator rejects a call whose item disagrees with its deltas)."""
    field = _CALL_TEXT.get(item.get("type"))  # type: ignore[arg-type]
    if field is None or field not in item:
        return item
    return {key: value for key, value in item.items() if key != field}


def _turn_call_id(item: Mapping[str, Any]) -> str | None:
    """The call an output item is, for the turn: a client call's ``call_id``, an
    approval request's ``id``; None for an item that asks nothing of the client."""
    itype = item.get("type")
    if itype == MCP_APPROVAL_REQUEST:
        value = item.get("id")
    elif itype in PROVIDER_EXECUTED_ITEMS or _hosted_shell(item) or (
        isinstance(itype, str) and itype.endswith("_output")
    ):
        return None
    else:
        value = item.get("call_id")
    return value if isinstance(value, str) and value else None


def _program_invoked(item: Mapping[str, Any]) -> bool:
    """Whether a program (programmatic tool calling) made this call and waits for it.

    Anything but a ``caller`` object saying ``program`` is no: the call then needs
    ``status: "completed"`` like any other (fail closed, the stream goes on)."""
    caller = item.get("caller")
    return isinstance(caller, Mapping) and caller.get("type") == "program"


def _hosted_shell(item: Mapping[str, Any]) -> bool:
    """A ``shell_call`` the platform's container runs. A local environment, or one
    not named, is the client's to run: that fails closed as an unsupported call."""
    if item.get("type") != "shell_call":
        return False
    environment = item.get("environment")
    return isinstance(environment, Mapping) and (
        environment.get("type") in HOSTED_SHELL_ENVIRONMENTS
    )
