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
(there is no ``[DONE]``). Vertex's incrementally streamed arguments
(``partialArgs`` / ``willContinue``) are not supported and are rejected.

With ``candidateCount > 1`` candidates are alternatives: only the selected one
(0 unless configured) yields calls. Keys are accepted in the wire's camelCase and
in the snake_case an SDK's ``model_dump()`` may produce.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from agent_gate.plainjson import dumps
from agent_gate.providers.base import (
    ProviderAdapter,
    WireEvent,
    WireKind,
    content_digest,
    mapping_content,
)
from agent_gate.providers.events import (
    Heartbeat,
    ResponseCompleted,
    ResponseFailed,
    ResponseIncomplete,
    StreamAnomaly,
    StreamEvent,
    TextDelta,
    ToolCallArgumentsDone,
    ToolCallCut,
    ToolCallStarted,
    UnknownEvent,
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
        self._state = _CandidateState.STREAMING

    def translate(self, wire: WireEvent, index: int) -> list[StreamEvent]:
        if wire.kind is WireKind.HEARTBEAT:
            return [Heartbeat()]
        if wire.kind is WireKind.DONE:
            return [UnknownEvent("[DONE]")]
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
            return [ResponseFailed(label)]
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
                    return [ResponseIncomplete(block)]
            if "usageMetadata" in data or "usage_metadata" in data:
                return []
            return [UnknownEvent("chunk_without_candidates")]
        if not isinstance(candidates, list):
            raise self.malformed(index, "field 'candidates' is not a list")
        out: list[StreamEvent] = []
        for position, candidate in enumerate(candidates):
            if not isinstance(candidate, Mapping):
                raise self.malformed(index, "a candidate is not an object")
            cand_index = candidate.get("index", position)
            if not isinstance(cand_index, int) or isinstance(cand_index, bool):
                raise self.malformed(index, "field 'index' of candidate is not an integer")
            if cand_index == self._candidate:
                out += self._candidate_chunk(candidate, index)
        return out

    def _candidate_chunk(self, candidate: Mapping[str, Any], index: int) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        content = candidate.get("content")
        if content is not None:
            if not isinstance(content, Mapping):
                raise self.malformed(index, "field 'content' of candidate is not an object")
            parts = content.get("parts", [])
            if not isinstance(parts, list):
                raise self.malformed(index, "field 'parts' of content is not a list")
            for part in parts:
                if not isinstance(part, Mapping):
                    raise self.malformed(index, "a part is not an object")
                out += self._part(part, index)
        finish = _get(candidate, "finishReason", "finish_reason")
        if finish is not None:
            if not isinstance(finish, str):
                raise self.malformed(index, "field 'finishReason' of candidate is not a string")
            out += self._finish(finish)
        return out

    def _part(self, part: Mapping[str, Any], index: int) -> list[StreamEvent]:
        text = part.get("text")
        call = _get(part, "functionCall", "function_call")
        if call is None:
            return [TextDelta(text)] if isinstance(text, str) and text else []
        if not isinstance(call, Mapping):
            raise self.malformed(index, "field 'functionCall' of part is not an object")
        name = self.field_str(call, "name", index, "functionCall")
        ordinal = self._ordinal
        self._ordinal += 1
        given_id = call.get("id")
        if isinstance(given_id, str) and given_id:
            call_id = given_id
        else:
            call_id = f"{self._response_part()}:{self._candidate}:{ordinal}"
        out: list[StreamEvent] = [ToolCallStarted(call_id, name, ordinal)]
        if self._state is _CandidateState.FINISHED:
            return [*out, StreamAnomaly("call_after_finish", (call_id,))]
        partial = _get(call, "partialArgs", "partial_args")
        will_continue = _get(call, "willContinue", "will_continue")
        if partial is not None or will_continue is not None:
            return [*out, StreamAnomaly("partial_function_call_args_unsupported", (call_id,))]
        args = call.get("args", {})
        # Re-serialized for the ledger's hash (at any depth: a call nested too deep is
        # rejected by the strict parse, alone); a non-object is rejected downstream.
        self._pending.append(_Pending(call_id, dumps(args)))
        return out

    def _response_part(self) -> str:
        """``responseId``, or the digest of the content so far (see the module docstring)."""
        if self._prefix is None:
            self._prefix = self._response_id or f"gemini-{self._content.hexdigest()}"
        return self._prefix

    def _finish(self, reason: str) -> list[StreamEvent]:
        if self._state is _CandidateState.FINISHED:
            return []
        self._state = _CandidateState.FINISHED
        pending, self._pending = self._pending, []
        if reason == "STOP":
            return [
                *(ToolCallArgumentsDone(p.call_id, p.arguments) for p in pending),
                ResponseCompleted(),
            ]
        return [*(ToolCallCut(p.call_id, reason) for p in pending), ResponseIncomplete(reason)]
