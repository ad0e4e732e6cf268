"""``agent-gate sse decode``: the strict decoder over a file or standard input."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import BinaryIO

import click

from agent_gate.cli._options import F
from agent_gate.sse import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_STREAM_BYTES,
    ServerSentEvent,
    SSEDecoder,
    SSELimitExceeded,
)


def _emit(event: ServerSentEvent) -> None:
    click.echo(
        json.dumps({"event": event.event, "data": event.data, "id": event.id}, ensure_ascii=False)
    )


def _decode(stream: BinaryIO, decoder: SSEDecoder, chunk_size: int) -> None:
    while chunk := stream.read(chunk_size):
        for event in decoder.feed(chunk):
            _emit(event)


def _byte_count_option(
    flag: str, default: int, help: str | None = None
) -> Callable[[F], F]:
    """A byte count of at least 1, shown with its default: the read size and each limit."""
    return click.option(
        flag, type=click.IntRange(min=1), default=default, show_default=True, help=help
    )


@click.group(name="sse")
def sse_group() -> None:
    """Inspect raw text/event-stream data."""


@sse_group.command(name="decode")
@click.argument("source", type=click.File("rb"), default="-")
@_byte_count_option(
    "--chunk-size", 65536, help="Bytes per read; any value must give the same events."
)
@_byte_count_option("--max-line-bytes", DEFAULT_MAX_LINE_BYTES)
@_byte_count_option("--max-event-bytes", DEFAULT_MAX_EVENT_BYTES)
@_byte_count_option("--max-stream-bytes", DEFAULT_MAX_STREAM_BYTES)
def decode(
    source: BinaryIO,
    chunk_size: int,
    max_line_bytes: int,
    max_event_bytes: int,
    max_stream_bytes: int,
) -> None:
    """Print one JSON object per dispatched event, then an {"end": ...} summary.

    SOURCE is a file holding a raw event stream, or - for standard input.
    """
    decoder = SSEDecoder(
        max_line_bytes=max_line_bytes,
        max_event_bytes=max_event_bytes,
        max_stream_bytes=max_stream_bytes,
    )
    try:
        _decode(source, decoder, chunk_size)
    except SSELimitExceeded as exc:
        for event in exc.events:
            _emit(event)
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    # The decoder's own record, so its fields are listed in one place; less ``comments``,
    # a key this command's output has never had (scripts read it as it is).
    summary = {k: v for k, v in decoder.end().as_dict().items() if k != "comments"}
    click.echo(json.dumps({"end": summary}, ensure_ascii=False))
