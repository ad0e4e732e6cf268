"""Fixtures: a real loopback server with the transport tests' transcripts.

Every test talks to it over real sockets with a real httpx client; every
client has a timeout and every server wait is bounded, so a broken test fails
instead of hanging.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agent_gate.stream_server import IdMode, StreamServer, Transcript

TRANSCRIPTS = Path(__file__).parent / "transcripts"


def numbered(n: int) -> Transcript:
    """``n`` delta events then a ``done`` event, ids 1..n+1."""
    events = [{"event": "delta", "data": f'{{"n": {i}}}'} for i in range(n)]
    events.append({"event": "done", "data": '{"n": "end"}'})
    return Transcript(events)


@pytest.fixture
def tools() -> Transcript:
    return Transcript.from_file(TRANSCRIPTS / "anthropic_tool_use.sse")


@pytest.fixture
def numbers() -> Transcript:
    return numbered(12)


@pytest.fixture
def openai_transcript() -> Transcript:
    return Transcript.from_file(
        TRANSCRIPTS / "openai_responses_background.sse", id_mode=IdMode.NONE
    )


@pytest.fixture
def server(
    tools: Transcript, numbers: Transcript, openai_transcript: Transcript
) -> Iterator[StreamServer]:
    transcripts = {
        "tools": tools,
        "noids": Transcript.from_file(TRANSCRIPTS / "anthropic_tool_use.sse", id_mode=IdMode.NONE),
        "numbers": numbers,
        "openai": openai_transcript,
    }
    with StreamServer(transcripts, join_timeout=2.0) as srv:
        yield srv
    assert srv.unfinished_threads == 0


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=httpx.Timeout(5.0)) as c:
        yield c
