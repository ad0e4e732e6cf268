"""Feed the typed events of the official ``openai`` and ``anthropic`` SDKs to the gate.

The SDKs frame the SSE stream themselves and yield typed event objects
(``client.responses.create(..., stream=True)``, ``client.messages.create(...,
stream=True)``). Hand those objects to ``gate.run`` as they are: the provider
adapter reads them through their own ``model_dump()``; nothing is turned back
into text and split again. In a live agent that is::

    stream = client.responses.create(model=..., input=..., tools=..., stream=True)
    result = gate.run(stream, task_id=task, provider="openai-responses")

    with client.messages.create(model=..., messages=..., tools=..., max_tokens=1024,
                                stream=True) as stream:
        result = gate.run(stream, task_id=task, provider="anthropic")

(``client.messages.stream(...)`` yields the SDK's higher-level helper events too;
pass ``stream=True`` to ``create`` for the raw protocol events.)

So that it runs offline, this example builds the same events from the SDKs' own
event classes, as the SDKs yield them: an OpenAI response with one complete
call (it runs), and an Anthropic message whose second tool_use block was cut
off by ``max_tokens``. Nothing of that message runs: the cut call never
completed, and the complete one is a write, which waits for a response that
completed. Needs ``pip install openai anthropic``.

Run it: ``python examples/sdk_events.py``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent_gate import Gate, ToolRegistry, current_call

ARGS = '{"to":"ops@example.com","subject":"Deploy done","body":"v1.2 is live."}'
CUT = '{"to":"ops@example.com","subj'  # where max_tokens stopped the second call


# ----------------------------------------------------------------- the tools


def make_tools(outbox: Path) -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(
        schema={
            "type": "object",
            "properties": {"to": {"type": "string"}, "subject": {"type": "string"},
                           "body": {"type": "string"}},
            "required": ["to", "subject", "body"],
        },
        effect="write",
    )
    def send_email(to: str, subject: str, body: str) -> str:
        with outbox.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"task": current_call().task_id, "to": to}) + "\n")
        return "queued"

    return tools


# ------------------------------------------------- OpenAI Responses, typed events


def openai_events() -> Iterator[Any]:
    """What ``client.responses.create(..., stream=True)`` yields for one complete call."""
    from openai.types.responses import (
        Response,
        ResponseCompletedEvent,
        ResponseCreatedEvent,
        ResponseFunctionCallArgumentsDeltaEvent,
        ResponseFunctionCallArgumentsDoneEvent,
        ResponseFunctionToolCall,
        ResponseOutputItemAddedEvent,
        ResponseOutputItemDoneEvent,
    )

    seq = iter(range(1000))

    def response(status: str, output: list[Any]) -> Response:
        return Response(id="resp_sdk_1", created_at=1767225600, model="gpt-4.1",
                        object="response", output=output, parallel_tool_calls=True,
                        tool_choice="auto", tools=[], status=status)

    def call(arguments: str, status: str) -> ResponseFunctionToolCall:
        return ResponseFunctionToolCall(type="function_call", id="fc_1",
                                        call_id="call_sdk_openai_1", name="send_email",
                                        arguments=arguments, status=status)

    yield ResponseCreatedEvent(type="response.created", sequence_number=next(seq),
                               response=response("in_progress", []))
    yield ResponseOutputItemAddedEvent(type="response.output_item.added", output_index=0,
                                       sequence_number=next(seq), item=call("", "in_progress"))
    for start in range(0, len(ARGS), 16):
        yield ResponseFunctionCallArgumentsDeltaEvent(
            type="response.function_call_arguments.delta", item_id="fc_1", output_index=0,
            sequence_number=next(seq), delta=ARGS[start:start + 16])
    yield ResponseFunctionCallArgumentsDoneEvent(
        type="response.function_call_arguments.done", item_id="fc_1", output_index=0,
        sequence_number=next(seq), arguments=ARGS)
    done = call(ARGS, "completed")
    yield ResponseOutputItemDoneEvent(type="response.output_item.done", output_index=0,
                                      sequence_number=next(seq), item=done)
    yield ResponseCompletedEvent(type="response.completed", sequence_number=next(seq),
                                 response=response("completed", [done]))


# ------------------------------------------------ Anthropic Messages, typed events


def anthropic_events() -> Iterator[Any]:
    """What ``client.messages.create(..., stream=True)`` yields for two tool_use blocks,
    the second cut off by ``max_tokens``."""
    from anthropic.types import (
        InputJSONDelta,
        Message,
        MessageDeltaUsage,
        RawContentBlockDeltaEvent,
        RawContentBlockStartEvent,
        RawContentBlockStopEvent,
        RawMessageDeltaEvent,
        RawMessageStartEvent,
        RawMessageStopEvent,
        ToolUseBlock,
        Usage,
    )
    from anthropic.types.raw_message_delta_event import Delta

    yield RawMessageStartEvent(
        type="message_start",
        message=Message(id="msg_sdk_1", type="message", role="assistant", content=[],
                        model="claude-sonnet-4-5", usage=Usage(input_tokens=120,
                                                               output_tokens=1)))
    for index, (tool_id, text, finished) in enumerate(
        [("toolu_sdk_anthropic_1", ARGS, True), ("toolu_sdk_anthropic_2", CUT, False)]
    ):
        yield RawContentBlockStartEvent(
            type="content_block_start", index=index,
            content_block=ToolUseBlock(type="tool_use", id=tool_id, name="send_email",
                                       input={}))
        for start in range(0, len(text), 16):
            yield RawContentBlockDeltaEvent(
                type="content_block_delta", index=index,
                delta=InputJSONDelta(type="input_json_delta",
                                     partial_json=text[start:start + 16]))
        if finished:
            yield RawContentBlockStopEvent(type="content_block_stop", index=index)
    yield RawMessageDeltaEvent(type="message_delta", delta=Delta(stop_reason="max_tokens"),
                               usage=MessageDeltaUsage(output_tokens=64))
    yield RawMessageStopEvent(type="message_stop")


# ------------------------------------------------------------------------ run


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="ledger URL (default: a temporary file)")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="agent-gate-sdk-"))
    db = args.db or f"sqlite:///{workdir / 'ledger.db'}"
    outbox = workdir / "outbox.jsonl"
    report: dict[str, Any] = {}
    with Gate(make_tools(outbox), db, create=True) as gate:
        for provider, events in (("openai-responses", openai_events),
                                 ("anthropic", anthropic_events)):
            task = f"sdk-{provider}"
            result = gate.run(events(), task_id=task, provider=provider)
            print(f"{provider}: response {result.terminal}")
            for o in result.outcomes:
                print(f"  {o.call_id:<24} {o.state.value:<11} {o.reason or ''}")
            report[provider] = {
                "terminal": str(result.terminal),
                "states": {o.call_id: o.state.value for o in result.outcomes},
            }
    sent = outbox.read_text(encoding="utf-8").splitlines() if outbox.exists() else []
    report["sent"] = [json.loads(line) for line in sent]
    print(f"mails sent: {len(sent)} (a write runs only once its response completed)")
    return report


if __name__ == "__main__":
    main()
