"""OpenAI Chat Completions streaming (also Azure OpenAI and OpenAI-compatible servers).

Correlation: a call is keyed by (choice index, tool-call index); its ``id`` and
function ``name`` arrive only on the first fragment. There is no per-call
completion signal: the calls of a choice are complete only when that choice's
``finish_reason`` is ``tool_calls``, or ``stop`` with calls present (a forced
tool choice ends that way). ``length`` and ``content_filter`` mean the batch was
cut, even when the text so far happens to parse as JSON. The stream ends with
``data: [DONE]``; chunks with empty ``choices`` (usage, Azure prompt filter
results) are normal.

With ``n > 1`` the choices are alternative answers, not parallel work: only
the selected choice (0 unless configured) yields calls.

An official SDK consumes ``[DONE]`` itself and never shows it, so a stream fed
as SDK objects cannot tell a clean end from a cut one and ends ``truncated``;
feed raw SSE events (or an explicit ``[DONE]`` event) to get a terminal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from agent_gate.providers.base import ProviderAdapter, WireEvent, WireKind
from agent_gate.providers.events import (
    Heartbeat,
    ResponseCompleted,
    ResponseFailed,
    ResponseIncomplete,
    StreamAnomaly,
    StreamEvent,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallArgumentsDone,
    ToolCallCut,
    ToolCallStarted,
    UnknownEvent,
)

_SUCCESS_FINISH = frozenset({"stop", "tool_calls"})


class _ChoiceState(Enum):
    STREAMING = "streaming"
    FINISHED = "finished"


@dataclass(slots=True)
class _Call:
    call_id: str
    name: str


class OpenAIChatAdapter(ProviderAdapter):
    """State machine for the selected choice of one Chat Completions stream."""

    name = "openai-chat"

    def __init__(self, *, choice: int = 0) -> None:
        self._choice = choice
        self._calls: dict[int, _Call] = {}
        self._state = _ChoiceState.STREAMING
        self._finish_reason: str | None = None

    def hot_delta(self, data: Mapping[str, Any], sse_type: str) -> tuple[str, str] | None:
        # One chunk, one choice, one fragment continuing a known call: nothing else.
        if "type" in data or "error" in data:
            return None
        choices = data.get("choices")
        if type(choices) is not list or len(choices) != 1:
            return None
        choice = choices[0]
        if type(choice) is not dict or choice.get("finish_reason") is not None:
            return None
        choice_index = choice.get("index")
        if type(choice_index) is not int or choice_index != self._choice:
            return None
        delta = choice.get("delta")
        if type(delta) is not dict or delta.get("content") or "function_call" in delta:
            return None
        tool_calls = delta.get("tool_calls")
        if type(tool_calls) is not list or len(tool_calls) != 1:
            return None
        fragment = tool_calls[0]
        if type(fragment) is not dict:
            return None
        tool_index = fragment.get("index")
        if type(tool_index) is not int:
            return None
        call = self._calls.get(tool_index)
        if call is None:
            return None
        frag_id = fragment.get("id")
        if frag_id is not None and (type(frag_id) is not str or frag_id not in ("", call.call_id)):
            return None
        function = fragment.get("function")
        if type(function) is not dict:
            return None
        name = function.get("name")
        if name is not None and (type(name) is not str or name not in ("", call.name)):
            return None
        arguments = function.get("arguments")
        if type(arguments) is not str or not arguments:
            return None
        return call.call_id, arguments

    def translate(self, wire: WireEvent, index: int) -> list[StreamEvent]:
        if wire.kind is WireKind.HEARTBEAT:
            return [Heartbeat()]
        if wire.kind is WireKind.DONE:
            return [self._terminal()]
        data = wire.data
        if data.get("type") == "chunk" and isinstance(data.get("chunk"), Mapping):
            # The SDK's ``chat.completions.stream()`` helper wraps each raw chunk.
            data = data["chunk"]
        elif isinstance(data.get("type"), str):
            # The helper's derived events (content.delta, tool_calls...arguments.done,
            # ...) restate chunks with the helper's own completion guesses: ignore them.
            return [UnknownEvent(data["type"])]
        error = data.get("error")
        if isinstance(error, Mapping):
            return [ResponseFailed(_error_code(error))]
        choices = data.get("choices")
        if choices is None:
            return [UnknownEvent("chunk_without_choices")]
        if not isinstance(choices, list):
            raise self.malformed(index, "field 'choices' is not a list")
        out: list[StreamEvent] = []
        raw_id = data.get("id")
        chunk_id = raw_id if isinstance(raw_id, str) else ""
        for choice in choices:
            if not isinstance(choice, Mapping):
                raise self.malformed(index, "a choice is not an object")
            if self.field_int(choice, "index", index, "choice") != self._choice:
                continue
            out += self._choice_chunk(choice, chunk_id, index)
        return out

    def _choice_chunk(
        self, choice: Mapping[str, Any], chunk_id: str, index: int
    ) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        delta = choice.get("delta")
        if delta is not None:
            if not isinstance(delta, Mapping):
                raise self.malformed(index, "field 'delta' of choice is not an object")
            content = delta.get("content")
            if isinstance(content, str) and content:
                out.append(TextDelta(content))
            tool_calls = delta.get("tool_calls")
            if tool_calls is not None:
                if not isinstance(tool_calls, list):
                    raise self.malformed(index, "field 'tool_calls' of delta is not a list")
                for fragment in tool_calls:
                    if not isinstance(fragment, Mapping):
                        raise self.malformed(index, "a tool_calls fragment is not an object")
                    out += self._fragment(fragment, chunk_id, index)
            legacy = delta.get("function_call")
            if isinstance(legacy, Mapping) and legacy.get("name"):
                call_id = f"{chunk_id}:{self._choice}:function_call"
                out += [
                    ToolCallStarted(call_id, str(legacy["name"]), -1),
                    StreamAnomaly("legacy_function_call_unsupported", (call_id,)),
                ]
        finish = choice.get("finish_reason")
        if finish is not None:
            if not isinstance(finish, str):
                raise self.malformed(index, "field 'finish_reason' of choice is not a string")
            out += self._finish(finish)
        return out

    def _fragment(
        self, fragment: Mapping[str, Any], chunk_id: str, index: int
    ) -> list[StreamEvent]:
        where = "tool_calls fragment"
        tool_index = self.field_int(fragment, "index", index, where)
        frag_id = self.optional_str(fragment, "id", index, where) or None
        function = fragment.get("function")
        if function is None:
            function = {}
        if not isinstance(function, Mapping):
            raise self.malformed(index, "field 'function' of tool_calls fragment is not an object")
        name = self.optional_str(function, "name", index, "function") or None
        arguments = self.optional_str(function, "arguments", index, "function") or ""
        out: list[StreamEvent] = []
        call = self._calls.get(tool_index)
        if call is None or (frag_id is not None and frag_id != call.call_id):
            call_id = frag_id or f"{chunk_id}:{self._choice}:{tool_index}"
            previous = call
            call = _Call(call_id, name or "")
            self._calls[tool_index] = call
            out.append(ToolCallStarted(call_id, call.name, tool_index))
            if previous is not None:
                # A proxy reused the index for another call: neither can be trusted.
                out.append(StreamAnomaly("index_reused", (previous.call_id, call_id)))
            elif not call.name:
                out.append(StreamAnomaly("missing_tool_name", (call_id,)))
        elif name is not None and name != call.name:
            out.append(StreamAnomaly("tool_name_changed", (call.call_id,)))
        if arguments:
            out.append(ToolCallArgumentsDelta(call.call_id, arguments))
        return out

    def _finish(self, reason: str) -> list[StreamEvent]:
        if self._state is _ChoiceState.FINISHED:
            if reason == self._finish_reason:
                return []
            return [StreamAnomaly("finish_reason_changed", self._call_ids())]
        self._state = _ChoiceState.FINISHED
        self._finish_reason = reason
        if reason == "tool_calls" or (reason == "stop" and self._calls):
            return [ToolCallArgumentsDone(call_id) for call_id in self._call_ids()]
        return [ToolCallCut(call_id, reason) for call_id in self._call_ids()]

    def _call_ids(self) -> tuple[str, ...]:
        return tuple(self._calls[i].call_id for i in sorted(self._calls))

    def _terminal(self) -> StreamEvent:
        if self._finish_reason is None:
            return ResponseIncomplete("missing_finish_reason")
        if self._finish_reason in _SUCCESS_FINISH:
            return ResponseCompleted()
        return ResponseIncomplete(self._finish_reason)


def _error_code(error: Mapping[str, Any]) -> str | None:
    for key in ("code", "type"):
        value = error.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return None
