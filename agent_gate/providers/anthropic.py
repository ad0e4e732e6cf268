"""Anthropic Messages streaming.

Correlation: a call is a ``tool_use`` content block, keyed by the block
``index`` and identified by its ``id``. Its input arrives as
``input_json_delta.partial_json`` fragments to concatenate (an empty total
means ``{}``; the ``input: {}`` in ``content_block_start`` is a placeholder and
is never prefixed to the fragments).

``content_block_stop`` alone is not proof: when ``max_tokens`` hits, the block
can be stopped with half its JSON. A stopped block is complete only once a
later block starts (the model moved on) or ``message_delta`` says
``stop_reason: tool_use``. Any other stop reason (``max_tokens``, ``refusal``,
``pause_turn``, ``stop_sequence``...) or an ``error`` event cuts the blocks not
yet confirmed. ``ping`` is a heartbeat, not progress. ``server_tool_use`` and
``mcp_tool_use`` blocks are run by the platform.

Every block is also a piece of the assistant's turn (``TurnPart`` at its start;
text, thinking, its signature and a hosted tool's input grow it), so that the
turn goes back with its thinking blocks and signatures intact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from agent_gate.plainjson import dumps
from agent_gate.providers import events as ev
from agent_gate.providers.base import ProviderAdapter, WireEvent, provider_error_code

PROVIDER_EXECUTED_BLOCKS = frozenset({"server_tool_use", "mcp_tool_use"})
_SUCCESS_STOP = frozenset({"end_turn", "tool_use", "stop_sequence"})
_INFORMATIONAL = frozenset({"message_start"})
_KEPT_DELTAS = {"thinking_delta": "thinking", "signature_delta": "signature"}
"""Delta types that grow a block of the turn, and the block field each grows."""


class _BlockState(Enum):
    OPEN = "open"
    """Started, fragments may follow."""
    STOPPED = "stopped"
    """``content_block_stop`` seen; waiting for a later block or ``stop_reason: tool_use``."""
    SETTLED = "settled"
    """Completed or cut; nothing more may arrive for it."""


class _BlockKind(Enum):
    CLIENT_TOOL = "client_tool"
    PROVIDER_TOOL = "provider_tool"
    OTHER = "other"


@dataclass(slots=True)
class _Block:
    kind: _BlockKind
    block_id: str
    state: _BlockState
    fragment_chars: int = 0
    start_input: str | None = None
    """The start event's ``input`` re-serialized, when it was a non-empty object."""


class AnthropicAdapter(ProviderAdapter):
    """State machine for one Messages stream."""

    name = "anthropic"

    def __init__(self) -> None:
        self._blocks: dict[int, _Block] = {}
        self._stop_reason: str | None = None

    def hot_delta(self, data: Mapping[str, Any], sse_type: str) -> tuple[str, str] | None:
        if data.get("type") != "content_block_delta":
            return None
        if sse_type != "message" and sse_type != "content_block_delta":
            return None
        block_index = data.get("index")
        delta = data.get("delta")
        if type(block_index) is not int or type(delta) is not dict:
            return None
        if delta.get("type") != "input_json_delta":
            return None
        fragment = delta.get("partial_json")
        if type(fragment) is not str or not fragment:
            return None
        block = self._blocks.get(block_index)
        if (
            block is None
            or block.kind is not _BlockKind.CLIENT_TOOL
            or block.state is not _BlockState.OPEN
        ):
            return None
        block.fragment_chars += len(fragment)
        return block.block_id, fragment

    def translate_payload(self, wire: WireEvent, index: int) -> list[ev.StreamEvent]:
        etype = self.event_type(wire, index)
        data = wire.data
        if etype == "ping":
            return [ev.Heartbeat()]
        if etype == "content_block_start":
            return self._block_start(data, index)
        if etype == "content_block_delta":
            return self._block_delta(data, index)
        if etype == "content_block_stop":
            return self._block_stop(data, index)
        if etype == "message_delta":
            return self._message_delta(data, index)
        if etype == "message_stop":
            return self._message_stop()
        if etype == "error":
            return [ev.ResponseFailed(provider_error_code(data.get("error"), ("type",)))]
        if etype in _INFORMATIONAL:
            return []
        return [ev.UnknownEvent(etype)]

    def _block_start(self, data: Mapping[str, Any], index: int) -> list[ev.StreamEvent]:
        where = "content_block_start"
        block_index = self.field_int(data, "index", index, where)
        block = self.field_map(data, "content_block", index, where)
        btype = self.field_str(block, "type", index, where)
        kind = _block_kind(btype)
        known = self._blocks.get(block_index)
        reused: _Block | None = None
        if known is not None:
            if known.kind is kind and (
                kind is _BlockKind.OTHER or block.get("id") == known.block_id
            ):
                return []  # the same block announced again (a replayed event)
            if known.kind is _BlockKind.CLIENT_TOOL:
                # The index now names another block: the earlier one must not be
                # confirmed by this start, it can no longer be correlated at all.
                reused = known
                known.state = _BlockState.SETTLED
        # A new block: every stopped tool block before it is now confirmed complete.
        out: list[ev.StreamEvent] = [*self._confirm_stopped(), *self._reject_open(block_index)]
        out.append(ev.TurnPart(block_index, block, _call_id(block, kind)))
        if kind is _BlockKind.OTHER:
            self._blocks[block_index] = _Block(kind, "", _BlockState.OPEN)
            if reused is not None:
                out.append(ev.StreamAnomaly("index_reused", (reused.block_id,)))
            return out
        block_id = self.field_str(block, "id", index, where)
        name = self.field_str(block, "name", index, where)
        if kind is _BlockKind.PROVIDER_TOOL:
            out.append(ev.ProviderToolCall(block_id, name, btype, block_index))
            self._blocks[block_index] = _Block(kind, block_id, _BlockState.SETTLED)
            if reused is not None:
                out.append(ev.StreamAnomaly("index_reused", (reused.block_id,)))
            return out
        start_input = block.get("input", {})
        if not isinstance(start_input, Mapping):
            raise self.malformed(index, "field 'input' of tool_use block is not an object")
        entry = _Block(kind, block_id, _BlockState.OPEN)
        if start_input:
            # At any depth: an input nested too deep is rejected by the strict parse.
            entry.start_input = dumps(start_input, separators=(",", ":"))
        self._blocks[block_index] = entry
        out.append(ev.ToolCallStarted(block_id, name, block_index))
        if reused is not None:
            out.append(ev.StreamAnomaly("index_reused", (reused.block_id, block_id)))
        return out

    def _block_delta(self, data: Mapping[str, Any], index: int) -> list[ev.StreamEvent]:
        where = "content_block_delta"
        block_index = self.field_int(data, "index", index, where)
        delta = self.field_map(data, "delta", index, where)
        dtype = self.field_str(delta, "type", index, where)
        if dtype == "text_delta":
            return [ev.TextDelta(self.field_str(delta, "text", index, dtype), block_index)]
        kept = _KEPT_DELTAS.get(dtype)
        if kept is not None:  # thinking and its signature: sent back, never shown
            return [ev.TurnDelta(block_index, kept, self.field_str(delta, kept, index, dtype))]
        if dtype == "citations_delta":  # kept with its text block for the next turn
            citation = delta.get("citation")  # not a call's: never fatal
            if not isinstance(citation, Mapping):
                return [ev.StreamAnomaly("malformed_citation")]
            return [ev.TurnAppend(block_index, "citations", citation)]
        if dtype != "input_json_delta":
            return []
        fragment = self.field_str(delta, "partial_json", index, dtype)
        block = self._blocks.get(block_index)
        if block is None:
            return [ev.StreamAnomaly("delta_for_unknown_call")]
        if block.kind is not _BlockKind.CLIENT_TOOL:
            # A hosted tool's input: the platform runs it; the turn keeps its text.
            return [ev.TurnDelta(block_index, "input", fragment)] if fragment else []
        if block.state is not _BlockState.OPEN:
            return [ev.StreamAnomaly("delta_after_completion", (block.block_id,))]
        block.fragment_chars += len(fragment)
        return [ev.ToolCallArgumentsDelta(block.block_id, fragment)] if fragment else []

    def _block_stop(self, data: Mapping[str, Any], index: int) -> list[ev.StreamEvent]:
        block_index = self.field_int(data, "index", index, "content_block_stop")
        block = self._blocks.get(block_index)
        if block is None:
            return [ev.StreamAnomaly("stop_for_unknown_block")]
        if block.state is _BlockState.OPEN:
            block.state = (
                _BlockState.STOPPED
                if block.kind is _BlockKind.CLIENT_TOOL
                else (_BlockState.SETTLED)
            )
        return []

    def _message_delta(self, data: Mapping[str, Any], index: int) -> list[ev.StreamEvent]:
        delta = self.field_map(data, "delta", index, "message_delta")
        reason = self.optional_str(delta, "stop_reason", index, "message_delta")
        if reason is None:
            return []
        if self._stop_reason is not None:
            if reason == self._stop_reason:
                return []
            return [ev.StreamAnomaly("stop_reason_changed", self._unsettled_ids())]
        self._stop_reason = reason
        if reason == "tool_use":
            out = self._confirm_stopped()
            return out + self._cut_unsettled("block_not_stopped")
        return self._cut_unsettled(reason)

    def _message_stop(self) -> list[ev.StreamEvent]:
        if self._stop_reason is None:
            return [
                *self._cut_unsettled("missing_stop_reason"),
                ev.ResponseIncomplete("missing_stop_reason"),
            ]
        if self._stop_reason in _SUCCESS_STOP:
            return [ev.ResponseCompleted()]
        return [ev.ResponseIncomplete(self._stop_reason)]

    def _confirm_stopped(self) -> list[ev.StreamEvent]:
        out: list[ev.StreamEvent] = []
        for block in self._blocks.values():
            if block.kind is _BlockKind.CLIENT_TOOL and block.state is _BlockState.STOPPED:
                block.state = _BlockState.SETTLED
                out.append(ev.ToolCallArgumentsDone(block.block_id, self._final_text(block)))
                if block.start_input is not None and block.fragment_chars:
                    out.append(ev.StreamAnomaly("start_input_and_deltas", (block.block_id,)))
        return out

    def _final_text(self, block: _Block) -> str | None:
        if block.fragment_chars:
            return None  # the fragments are the input
        return block.start_input if block.start_input is not None else "{}"

    def _reject_open(self, exclude: int) -> list[ev.StreamEvent]:
        """Blocks are sequential: one still open when another starts was never finished."""
        ids: list[str] = []
        for block_index, block in self._blocks.items():
            if block_index == exclude:
                continue
            if block.kind is _BlockKind.CLIENT_TOOL and block.state is _BlockState.OPEN:
                block.state = _BlockState.SETTLED
                ids.append(block.block_id)
        return [ev.StreamAnomaly("block_not_stopped", tuple(ids))] if ids else []

    def _cut_unsettled(self, reason: str) -> list[ev.StreamEvent]:
        out: list[ev.StreamEvent] = []
        for block in self._blocks.values():
            if block.kind is _BlockKind.CLIENT_TOOL and block.state is not _BlockState.SETTLED:
                block.state = _BlockState.SETTLED
                out.append(ev.ToolCallCut(block.block_id, reason))
        return out

    def _unsettled_ids(self) -> tuple[str, ...]:
        return tuple(
            b.block_id
            for b in self._blocks.values()
            if b.kind is _BlockKind.CLIENT_TOOL and b.state is not _BlockState.SETTLED
        )


def _call_id(block: Mapping[str, Any], kind: _BlockKind) -> str | None:
    """A client ``tool_use`` block's id: its piece of the turn is that call's."""
    if kind is not _BlockKind.CLIENT_TOOL:
        return None
    value = block.get("id")
    return value if isinstance(value, str) else None


def _block_kind(btype: str) -> _BlockKind:
    if btype == "tool_use":
        return _BlockKind.CLIENT_TOOL
    if btype in PROVIDER_EXECUTED_BLOCKS:
        return _BlockKind.PROVIDER_TOOL
    return _BlockKind.OTHER
