"""The demo's response: one OpenAI Responses stream with four parallel tool calls.

Built here event by event rather than recorded, so that the call ids a user
types afterwards (``agent-gate approve call_mail_partner``) are readable and the
cut point is named by what it cuts, not by a magic offset. The events have the
wire shape of ``POST /v1/responses`` with ``stream: true`` (the same shape the
recorded transcripts in ``tests/transcripts/openai_responses`` have), including a
``sequence_number`` on every event.

Event ids are sparse, as on a server that checkpoints only now and then: the
stream start, the start of the third call, the end. A client cut in the middle
of the second call resumes from the stream start, so the server replays the
first call (already complete, already run) and the second call's beginning.
Those replayed events reach the pipeline again; the accumulator recognises each
by its sequence number and nothing runs twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agent_gate.stream_server import Transcript, TranscriptEvent

__all__ = [
    "CALLS",
    "CUT_INSIDE_EVENT",
    "PROVIDER",
    "RESPONSE_ID",
    "DemoCall",
    "demo_events",
    "demo_transcript",
]

PROVIDER = "openai-responses"
RESPONSE_ID = "resp_demo_4calls"
MODEL = "gpt-4.1-2025-04-14"
_DELTA_CHARS = 12


@dataclass(frozen=True, slots=True)
class DemoCall:
    call_id: str
    name: str
    arguments: dict[str, Any]
    expect: str
    """What the example policy decides: allow, approve or deny (the tests check it)."""

    @property
    def item_id(self) -> str:
        return "fc_" + self.call_id.removeprefix("call_")

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False, separators=(",", ":"))


CALLS: tuple[DemoCall, ...] = (
    DemoCall("call_weather", "get_weather", {"city": "Lisbon", "unit": "celsius"}, "allow"),
    DemoCall(
        "call_mail_team",
        "send_email",
        {
            "to": "team@example.com",
            "subject": "Offsite on Friday",
            "body": "Lisbon, 24 °C and sunny. See you there.",
        },
        "allow",
    ),
    DemoCall(
        "call_mail_partner",
        "send_email",
        {
            "to": "bob@partner.org",
            "subject": "Offsite on Friday",
            "body": "Bob, can you join us in Lisbon on Friday?",
        },
        "approve",
    ),
    DemoCall(
        "call_cleanup",
        "delete_file",
        {"path": "/srv/agent-gate/workspace/../../../etc/passwd"},
        "deny",
    ),
)

_CHECKPOINT_ITEMS = frozenset({2})
"""Output indexes whose ``output_item.added`` carries an event id."""


def _response(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": RESPONSE_ID,
        "object": "response",
        "created_at": 1767225600,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "model": MODEL,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "usage": None,
    }


def _item(call: DemoCall, status: str, arguments: str) -> dict[str, Any]:
    return {
        "id": call.item_id,
        "type": "function_call",
        "status": status,
        "arguments": arguments,
        "call_id": call.call_id,
        "name": call.name,
    }


def demo_events() -> list[TranscriptEvent]:
    """The stream's events, in order, with their sparse ids."""
    payloads: list[tuple[dict[str, Any], bool]] = []  # (payload, carries an id)

    def add(payload: dict[str, Any], checkpoint: bool = False) -> None:
        payload["sequence_number"] = len(payloads)
        payloads.append((payload, checkpoint))

    add({"type": "response.created", "response": _response("in_progress", [])}, True)
    add({"type": "response.in_progress", "response": _response("in_progress", [])})
    for index, call in enumerate(CALLS):
        add(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": _item(call, "in_progress", ""),
            },
            index in _CHECKPOINT_ITEMS,
        )
        text = call.arguments_json
        for start in range(0, len(text), _DELTA_CHARS):
            add(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": call.item_id,
                    "output_index": index,
                    "delta": text[start : start + _DELTA_CHARS],
                }
            )
        add(
            {
                "type": "response.function_call_arguments.done",
                "item_id": call.item_id,
                "output_index": index,
                "arguments": text,
            }
        )
        add(
            {
                "type": "response.output_item.done",
                "output_index": index,
                "item": _item(call, "completed", text),
            }
        )
    output = [_item(call, "completed", call.arguments_json) for call in CALLS]
    add({"type": "response.completed", "response": _response("completed", output)}, True)
    return [
        TranscriptEvent(
            data=json.dumps(payload, ensure_ascii=False, separators=(",", ":")),
            event=payload["type"],
            id=f"{RESPONSE_ID}:{payload['sequence_number']}" if checkpoint else None,
        )
        for payload, checkpoint in payloads
    ]


def _cut_point(events: list[TranscriptEvent]) -> int:
    """The third argument delta of the second call: mid-call, after the first call ran."""
    second = CALLS[1].item_id
    deltas = [
        i
        for i, e in enumerate(events)
        if e.event == "response.function_call_arguments.delta" and f'"{second}"' in e.data
    ]
    return deltas[2]


def demo_transcript() -> Transcript:
    return Transcript(demo_events())


CUT_INSIDE_EVENT = _cut_point(demo_events())
"""Index of the event the first connection is cut in the middle of."""
