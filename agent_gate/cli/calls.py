"""``agent-gate calls``: which tool calls a recorded stream really completed.

Decodes a raw event stream with the strict SSE decoder, runs it through the
provider's adapter and the accumulator, and prints one JSON object per call in
completion order, then the response's terminal state. Every call is released
as soon as its own completion signal arrives, so the order is the order in
which the provider finished them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO

import click

from agent_gate.accumulate import DispatchMode, stream_calls
from agent_gate.autodetect import accumulator
from agent_gate.calls import ToolCall
from agent_gate.errors import AgentGateError
from agent_gate.providers import AUTO, provider_names

_READ_SIZE = 65536


def call_record(call: ToolCall) -> dict[str, Any]:
    """The JSON shape of one call, as ``agent-gate calls`` prints it."""
    record: dict[str, Any] = {
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments,
        "status": call.status.value,
        "reason": call.reason,
    }
    if call.kind == "custom":
        # A custom tool's input is free text, not a JSON object.
        record["input"] = call.raw_arguments if call.complete else None
    return record


def _chunks(source: BinaryIO) -> Iterator[bytes]:
    while chunk := source.read(_READ_SIZE):
        yield chunk


@click.command(name="calls")
@click.argument("source", type=click.File("rb"), default="-")
@click.option(
    "--provider",
    required=True,
    type=click.Choice([*provider_names(), AUTO]),
    help="Wire protocol of the recorded stream (auto: told from its first events).",
)
def calls_command(source: BinaryIO, provider: str) -> None:
    """Print the tool calls a recorded stream completed, then its terminal state.

    SOURCE is a file holding a raw text/event-stream, or - for standard input.
    Each call is {"call_id", "name", "arguments", "status", "reason"}; the last
    line is {"terminal": ...}.
    """
    acc = accumulator(provider, dispatch=DispatchMode.ON_CALL_COMPLETE)
    try:
        for call in stream_calls(_chunks(source), acc):
            click.echo(json.dumps(call_record(call), ensure_ascii=False))
    except AgentGateError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    finally:
        if provider == AUTO and acc.provider != AUTO:
            click.echo(f"provider: detected {acc.provider}", err=True)
    click.echo(json.dumps({"terminal": str(acc.terminal)}))
