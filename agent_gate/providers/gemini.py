"""Gemini ``streamGenerateContent?alt=sse`` (Gemini API and Vertex AI).

Each SSE event is a whole ``GenerateContentResponse`` chunk. A call is a
``functionCall`` part that arrives whole, with ``args`` already an object; the
wire usually gives it no id, so one is synthesized as ``<response>:<candidate
index>:<ordinal of the call in that candidate>``. The ledger keys calls by (task,
call id), so the response part must differ between two turns of a task and be the
same whenever the same response is read again (a resume after ``Last-Event-ID``,
or a recorded response fed again), or a new turn's call would be answered from the
ledger without running, or a replay would run twice. It is, in order:

* the ``responseId`` the chunks carry (the Gemini API and Vertex AI send it on
  every chunk: an identifier of that one response);
* otherwise ``gemini-`` and a 96-bit BLAKE2b digest of the response's content up
  to and including the chunk of its first call: every chunk's sorted JSON, so
  whatever differs between two real turns is in it (Vertex's ``createTime``, the
  ``usageMetadata`` whose ``promptTokenCount`` grows as the conversation does,
  ``modelVersion``, the encrypted ``thoughtSignature`` that thinking models put on
  the first ``functionCall`` part of every response), and a replay of the same
  chunks, whose repeats the replay guard drops before they reach the adapter,
  hashes the same;
* a caller that knows a stable identifier of the response it requested (its own
  request id for the turn, reused when it resumes) may pass it as
  ``response_key``; it is mixed into that digest.

The residual case: two responses without ``responseId`` that are byte for byte
identical, chunk for chunk, cannot be told apart by their content; the second
turn's calls then carry the first's ids and are answered from the ledger, never
run twice. Only ``response_key`` separates those.

A part arriving whole is still not a finished answer: the calls of a candidate
are complete only when that candidate ends with ``finishReason: STOP``;
``MAX_TOKENS``, ``MALFORMED_FUNCTION_CALL``, ``SAFETY`` and every other reason
cut them. The chunk carrying the finish reason is the response's terminal
(there is no ``[DONE]``).

Vertex AI can stream one call's arguments (``streamFunctionCallArguments``): the
first ``functionCall`` part names the call and says ``willContinue: true``; later
parts carry no name, only ``partialArgs`` (each a ``jsonPath`` and one
``stringValue`` / ``numberValue`` / ``boolValue`` / ``nullValue``; a string may
come in pieces, each appended while the previous piece said ``willContinue``) or
nothing at all (a keep-alive); the part without ``willContinue`` ends the call. The
object is assembled from the paths (``_Assembly``) and then waits for the finish
reason like any other call; it gets its id and ordinal at its first part. Whatever
cannot be assembled exactly (a path that is unparseable, nests deeper than
``MAX_ARGUMENT_DEPTH``, or lands on a value already set; a string piece continuing
a path that was not an open string; a call ended with a string still open, or never
ended) rejects that call alone, with a reason id.

No part of a stream aborts it: a chunk, candidate or part of the wrong shape is a
``StreamAnomaly``. What it may have held is unknown, so it rejects the streamed call
then open (a piece of its arguments may be what was lost); the calls already
assembled keep waiting for the finish reason.

Each part of the selected candidate is also a piece of the assistant's turn
(``TurnPart``), thought signatures included; consecutive plain text parts are one
piece, grown by each chunk's text.

With ``candidateCount > 1`` candidates are alternatives: only the selected one
(0 unless configured) yields calls. Keys are accepted in the wire's camelCase and
in the snake_case an SDK's ``model_dump()`` may produce.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from agent_gate.plainjson import MAX_ARGUMENT_DEPTH, dumps
from agent_gate.providers import events as ev
from agent_gate.providers.base import (
    ProviderAdapter,
    WireEvent,
    content_digest,
    mapping_content,
)


class _CandidateState(Enum):
    STREAMING = "streaming"
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class _Pending:
    call_id: str
    arguments: str


def _get(obj: Mapping[str, Any], camel: str, snake: str) -> Any:
    value = obj.get(camel)
    return obj.get(snake) if value is None else value


_PLAIN_TEXT = frozenset({"text", "thought"})
_STREAMING_KEYS = frozenset(
    {"args", "partialArgs", "partial_args", "willContinue", "will_continue"}
)


def _announced(part: Mapping[str, Any]) -> Mapping[str, Any]:
    """A call's part as the turn keeps it: without its ``args`` or streaming fields
    (the arguments are the call's, whole or assembled, filled in when the turn is
    sent back), with everything else (its id, its thought signature)."""
    call = _get(part, "functionCall", "function_call")
    assert isinstance(call, Mapping)
    key = "functionCall" if "functionCall" in part else "function_call"
    return {
        **{k: v for k, v in part.items() if k != key},
        key: {k: v for k, v in call.items() if k not in _STREAMING_KEYS},
    }


# -- streamed arguments (Vertex ``partialArgs``) ---------------------------------

Path = tuple[str | int, ...]

_NAME = re.compile(r"[A-Za-z_\u0080-\U0010ffff][A-Za-z0-9_\u0080-\U0010ffff]*")
"""An RFC 9535 member-name shorthand (``.name``)."""
_INDEX = re.compile(r"(0|[1-9][0-9]{0,8})\]")
"""A non-negative array index without leading zeros (``[3]``)."""
_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "/": "/", "\\": "\\"}
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")


def _quoted(text: str, pos: int, quote: str) -> tuple[str, int] | None:
    """An RFC 9535 quoted member name starting after its opening quote, and the
    position after its closing quote; ``None`` if it is not one."""
    out: list[str] = []
    while pos < len(text):
        ch = text[pos]
        if ch == quote:
            joined = "".join(out)
            # \uD83D\uDE00 written as two escapes is one character.
            return joined.encode("utf-16-le", "surrogatepass").decode(
                "utf-16-le", "surrogatepass"
            ), pos + 1
        if ch < " ":
            return None
        if ch != "\\":
            out.append(ch)
            pos += 1
            continue
        esc = text[pos + 1 : pos + 2]
        if esc == quote or esc in _ESCAPES:
            out.append(quote if esc == quote else _ESCAPES[esc])
            pos += 2
        elif esc == "u" and _HEX4.fullmatch(text, pos + 2, pos + 6):
            out.append(chr(int(text[pos + 2 : pos + 6], 16)))
            pos += 6
        else:
            return None
    return None


def parse_json_path(text: str) -> Path | None:
    """The segments of a singular JSON Path (``$.a.b[0]['c d']``), or ``None``.

    Only what names one location is accepted: member names (shorthand or quoted)
    and non-negative indexes under ``$``. Wildcards, slices, filters, negative
    indexes and the bare root name no single argument, so they are refused.
    """
    if not text.startswith("$"):
        return None
    segments: list[str | int] = []
    pos = 1
    while pos < len(text):
        ch = text[pos]
        if ch == ".":
            name = _NAME.match(text, pos + 1)
            if name is None:
                return None
            segments.append(name.group())
            pos = name.end()
        elif ch == "[":
            index = _INDEX.match(text, pos + 1)
            if index is not None:
                segments.append(int(index.group(1)))
                pos = index.end()
                continue
            quote = text[pos + 1 : pos + 2]
            if quote not in ("'", '"'):
                return None
            found = _quoted(text, pos + 2, quote)
            if found is None or not text.startswith("]", found[1]):
                return None
            segments.append(found[0])
            pos = found[1] + 1
        else:
            return None
    return tuple(segments) if segments else None


_MISSING = object()
_VALUE_KEYS = (
    ("stringValue", "string_value"),
    ("numberValue", "number_value"),
    ("boolValue", "bool_value"),
    ("nullValue", "null_value"),
)


def _partial_value(arg: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The one value a ``PartialArg`` carries, or the reason it carries none."""
    found = [
        (camel, arg[key]) for camel, snake in _VALUE_KEYS for key in (camel, snake) if key in arg
    ]
    if not found:
        return None, "partial_arg_without_value"
    if len(found) > 1:
        return None, "partial_arg_with_several_values"
    kind, value = found[0]
    if kind == "stringValue":
        ok = isinstance(value, str)
    elif kind == "numberValue":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and isinstance(value, float) and not math.isfinite(value):
            return None, "partial_arg_number_not_finite"
    elif kind == "boolValue":
        ok = isinstance(value, bool)
    else:  # proto3 JSON writes NullValue as null; SDK enums as "NULL_VALUE"
        ok, value = value in (None, "NULL_VALUE", 0) and not isinstance(value, bool), None
    return (value, None) if ok else (None, "partial_arg_value_of_wrong_type")


def _child(node: dict[str, Any] | list[Any], key: str | int) -> Any:
    if isinstance(node, dict):
        return node.get(key, _MISSING)  # type: ignore[call-overload]
    return node[key] if key < len(node) else _MISSING  # type: ignore[operator, index]


def _put(node: dict[str, Any] | list[Any], key: str | int, value: Any) -> bool:
    """Set a missing member; an index past the end of an array (a gap) is refused."""
    if isinstance(node, dict):
        node[key] = value  # type: ignore[index]
        return True
    if key != len(node):
        return False
    node.append(value)
    return True


def _fits(node: object, key: str | int) -> bool:
    return isinstance(node, list) if isinstance(key, int) else isinstance(node, dict)


@dataclass(slots=True)
class _Assembly:
    """One streamed call's arguments object, built from its ``PartialArg``s.

    Each path may be set once; a string may grow only while its last piece said
    ``willContinue`` and only by the very next ``PartialArg``. Any other shape
    means the object cannot be known exactly, and the call is rejected.
    """

    root: dict[str, Any] = field(default_factory=dict)
    open_path: Path | None = None
    open_slot: tuple[dict[str, Any] | list[Any], str | int] | None = None
    pieces: list[str] = field(default_factory=list)

    def apply(self, arg: object) -> str | None:
        """Apply one ``PartialArg``; the reason it cannot be applied, or ``None``."""
        if not isinstance(arg, Mapping):
            return "partial_arg_not_an_object"
        text = _get(arg, "jsonPath", "json_path")
        if not isinstance(text, str):
            return "partial_arg_without_json_path"
        path = parse_json_path(text)
        if path is None:
            return "unparseable_json_path"
        if len(path) > MAX_ARGUMENT_DEPTH:  # the root and one container per segment but the last
            return "arguments_too_deep"
        value, problem = _partial_value(arg)
        if problem is not None:
            return problem
        more = _get(arg, "willContinue", "will_continue")
        if more is not None and not isinstance(more, bool):
            return "will_continue_not_a_boolean"
        if self.open_path is not None:
            if path != self.open_path:
                return "string_pieces_interrupted"
            if not isinstance(value, str):
                return "string_continued_with_non_string"
            self.pieces.append(value)
        else:
            if more and not isinstance(value, str):
                return "non_string_continued"
            slot = self._slot(path)
            if isinstance(slot, str):
                return slot
            node, key = slot
            if not _put(node, key, value):
                return "json_path_skips_array_index"
            if more:
                self.open_path, self.open_slot, self.pieces = path, slot, [value]
        if not more and self.open_slot is not None:
            node, key = self.open_slot
            node[key] = "".join(self.pieces)  # type: ignore[index]
            self.open_path, self.open_slot, self.pieces = None, None, []
        return None

    def _slot(self, path: Path) -> tuple[dict[str, Any] | list[Any], str | int] | str:
        """The container and key where ``path`` ends, creating what leads there."""
        node: dict[str, Any] | list[Any] = self.root
        for key, following in zip(path, (*path[1:], None), strict=True):
            if not _fits(node, key):
                return "json_path_conflict"
            child = _child(node, key)
            if following is None:
                return (node, key) if child is _MISSING else "json_path_conflict"
            if child is _MISSING:
                child = [] if isinstance(following, int) else {}
                if not _put(node, key, child):
                    return "json_path_skips_array_index"
            node = child
        raise AssertionError("unreachable: a path has at least one segment")


@dataclass(slots=True)
class _Streamed:
    """The streamed call open in the selected candidate; ``assembly`` is ``None``
    once it was rejected (its remaining parts are then read and dropped)."""

    call_id: str
    assembly: _Assembly | None


class GeminiAdapter(ProviderAdapter):
    """State machine for the selected candidate of one Gemini stream."""

    name = "gemini"

    def __init__(self, *, candidate: int = 0, response_key: str | None = None) -> None:
        self._candidate = candidate
        self._response_id: str | None = None
        self._content = hashlib.blake2b(digest_size=12)
        if response_key is not None:
            self._content.update(b"key\x00" + response_key.encode("utf-8", "surrogatepass"))
        self._prefix: str | None = None
        """The response part of synthesized call ids, fixed at the first call."""
        self._ordinal = 0
        self._pending: list[_Pending] = []
        self._streamed: _Streamed | None = None
        self._state = _CandidateState.STREAMING
        self._positions = 0
        self._text_run: tuple[int, bool] | None = None
        """The plain text part of the turn that text may still grow, and whether
        it is a thought."""

    def translate_payload(self, wire: WireEvent, index: int) -> list[ev.StreamEvent]:
        data = wire.data
        error = data.get("error")
        if isinstance(error, Mapping):
            status = error.get("status")
            code = error.get("code")
            label = (
                status
                if isinstance(status, str) and status
                else (str(code) if isinstance(code, int) else None)
            )
            return [ev.ResponseFailed(label)]
        response_id = _get(data, "responseId", "response_id")
        if self._response_id is None and isinstance(response_id, str) and response_id:
            self._response_id = response_id
        if self._prefix is None:
            self._content.update(content_digest(mapping_content(data)))
        candidates = data.get("candidates")
        if candidates is None:
            feedback = _get(data, "promptFeedback", "prompt_feedback")
            if isinstance(feedback, Mapping):
                block = _get(feedback, "blockReason", "block_reason")
                if isinstance(block, str) and block:
                    return [ev.ResponseIncomplete(block)]
            if "usageMetadata" in data or "usage_metadata" in data:
                return []
            return [ev.UnknownEvent("chunk_without_candidates")]
        if not isinstance(candidates, list):
            return self._unreadable("candidates_not_a_list")
        out: list[ev.StreamEvent] = []
        for position, candidate in enumerate(candidates):
            if not isinstance(candidate, Mapping):
                out += self._unreadable("candidate_not_an_object")
                continue
            cand_index = candidate.get("index", position)
            if not isinstance(cand_index, int) or isinstance(cand_index, bool):
                out += self._unreadable("candidate_index_not_an_integer")
            elif cand_index == self._candidate:
                out += self._candidate_chunk(candidate)
        return out

    def _candidate_chunk(self, candidate: Mapping[str, Any]) -> list[ev.StreamEvent]:
        out: list[ev.StreamEvent] = []
        content = candidate.get("content")
        if content is not None:
            parts = content.get("parts", []) if isinstance(content, Mapping) else None
            if not isinstance(parts, list):
                out += self._unreadable("content_parts_not_a_list")
                parts = []
            for part in parts:
                if isinstance(part, Mapping):
                    out += self._part(part)
                else:
                    out += self._unreadable("part_not_an_object")
        finish = _get(candidate, "finishReason", "finish_reason")
        if finish is not None:
            if not isinstance(finish, str):
                out += self._unreadable("finish_reason_not_a_string")
                finish = "finish_reason_not_a_string"
            out += self._finish(finish)
        return out

    def _unreadable(self, reason: str) -> list[ev.StreamEvent]:
        """Something of the wrong shape: what it held is unknown, so the streamed call
        open now (if any) may have lost a piece and is rejected; nothing else is."""
        streamed = self._streamed
        if streamed is None or streamed.assembly is None:
            return [ev.StreamAnomaly(reason)]
        streamed.assembly = None
        return [ev.StreamAnomaly(reason, (streamed.call_id,))]

    def _turn_position(self) -> int:
        position = self._positions
        self._positions += 1
        return position

    def _text_part(self, part: Mapping[str, Any]) -> list[ev.StreamEvent]:
        """A part that is not a call. Plain text (``text``, ``thought``) continuing a
        plain run of the same kind grows that part of the turn; a part with a thought
        signature or anything else is a piece of its own, kept as it came."""
        text = part.get("text")
        if set(part) <= {"text"} and not text:
            return []
        thought = part.get("thought") is True
        plain = isinstance(text, str) and set(part) <= _PLAIN_TEXT
        run = self._text_run
        if plain and run is not None and run[1] == thought:
            assert isinstance(text, str)
            if thought:
                return [ev.TurnDelta(run[0], "text", text)]
            return [ev.TextDelta(text, run[0])]
        position = self._turn_position()
        self._text_run = (position, thought) if plain else None
        out: list[ev.StreamEvent] = [ev.TurnPart(position, part)]
        if isinstance(text, str) and text and not thought:
            out.append(ev.TextDelta(text))  # shown; the piece already holds it
        return out

    def _part(self, part: Mapping[str, Any]) -> list[ev.StreamEvent]:
        call = _get(part, "functionCall", "function_call")
        if call is None:
            return self._text_part(part)
        if not isinstance(call, Mapping):
            return self._unreadable("function_call_not_an_object")
        name = call.get("name")
        if name is None or name == "":
            if self._streamed is not None:
                return self._continue(call)
            return self._unreadable("function_call_without_name")
        if not isinstance(name, str):
            return self._unreadable("function_call_name_not_a_string")
        self._text_run = None
        out: list[ev.StreamEvent] = []
        if self._streamed is not None:  # a new call while one was still streaming
            out += self._unreadable("streamed_call_not_ended")
            self._streamed = None
        ordinal = self._ordinal
        self._ordinal += 1
        given_id = call.get("id")
        if isinstance(given_id, str) and given_id:
            call_id = given_id
        else:
            call_id = f"{self._response_part()}:{self._candidate}:{ordinal}"
        out.append(ev.ToolCallStarted(call_id, name, ordinal))
        out.append(ev.TurnPart(self._turn_position(), _announced(part), call_id))
        if self._state is _CandidateState.FINISHED:
            return [*out, ev.StreamAnomaly("call_after_finish", (call_id,))]
        partial = _get(call, "partialArgs", "partial_args")
        will_continue = _get(call, "willContinue", "will_continue")
        if partial is None and not will_continue:
            if will_continue is not None and will_continue is not False:
                return [*out, ev.StreamAnomaly("will_continue_not_a_boolean", (call_id,))]
            args = call.get("args", {})
            # Re-serialized for the ledger's hash (at any depth: a call nested too deep is
            # rejected by the strict parse, alone); a non-object is rejected downstream.
            self._pending.append(_Pending(call_id, dumps(args)))
            return out
        self._streamed = _Streamed(call_id, _Assembly())
        return out + self._continue(call)

    def _continue(self, call: Mapping[str, Any]) -> list[ev.StreamEvent]:
        """One part of the open streamed call: its pieces, and its end if it says so."""
        streamed = self._streamed
        assert streamed is not None
        out: list[ev.StreamEvent] = []
        more = _get(call, "willContinue", "will_continue")
        if streamed.assembly is not None:
            problem = self._apply(streamed.assembly, call, more)
            if problem is not None:
                out += self._unreadable(problem)
        if more is True:
            return out
        self._streamed = None
        assembly = streamed.assembly
        if assembly is None:
            return out
        if assembly.open_path is not None:
            return [*out, ev.StreamAnomaly("streamed_string_not_ended", (streamed.call_id,))]
        self._pending.append(_Pending(streamed.call_id, dumps(assembly.root)))
        return out

    @staticmethod
    def _apply(assembly: _Assembly, call: Mapping[str, Any], more: object) -> str | None:
        if more is not None and not isinstance(more, bool):
            return "will_continue_not_a_boolean"
        args = call.get("args")
        if args is not None and args != {}:
            return "args_beside_partial_args"
        partial = _get(call, "partialArgs", "partial_args")
        if partial is None:
            return None  # a keep-alive, or the bare end of the call
        if not isinstance(partial, list):
            return "partial_args_not_a_list"
        for arg in partial:
            problem = assembly.apply(arg)
            if problem is not None:
                return problem
        return None

    def _response_part(self) -> str:
        """``responseId``, or the digest of the content so far (see the module docstring)."""
        if self._prefix is None:
            self._prefix = self._response_id or f"gemini-{self._content.hexdigest()}"
        return self._prefix

    def _finish(self, reason: str) -> list[ev.StreamEvent]:
        if self._state is _CandidateState.FINISHED:
            return []
        self._state = _CandidateState.FINISHED
        pending, self._pending = self._pending, []
        out: list[ev.StreamEvent] = []
        streamed, self._streamed = self._streamed, None
        if streamed is not None and streamed.assembly is not None:
            # Finished before the part that ends it: its arguments may be partial.
            out.append(
                ev.StreamAnomaly("streamed_call_not_ended", (streamed.call_id,))
                if reason == "STOP"
                else ev.ToolCallCut(streamed.call_id, reason)
            )
        if reason == "STOP":
            return [
                *out,
                *(ev.ToolCallArgumentsDone(p.call_id, p.arguments) for p in pending),
                ev.ResponseCompleted(),
            ]
        return [
            *out,
            *(ev.ToolCallCut(p.call_id, reason) for p in pending),
            ev.ResponseIncomplete(reason),
        ]
