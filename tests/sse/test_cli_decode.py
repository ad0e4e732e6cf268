"""``agent-gate sse decode`` through the real console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

STREAM = (
    "\ufeffid: 1\r\nevent: note\r\ndata: 中\r\ndata: 文\r\n\r\n"
    ": ping\n\nretry: 1500\ndata: last\n\ndata: cut"
).encode()


def agent_gate(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agent_gate", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("chunk_size", ["1", "3", "65536"])
def test_decode_file_prints_events_then_end_summary(tmp_path: Path, chunk_size: str) -> None:
    source = tmp_path / "stream.sse"
    source.write_bytes(STREAM)
    proc = agent_gate("sse", "decode", str(source), "--chunk-size", chunk_size)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert lines[:2] == [
        {"event": "note", "data": "中\n文", "id": "1"},
        {"event": "message", "data": "last", "id": "1"},
    ]
    assert lines[2]["end"] == {
        "discarded_partial_event": True,
        "pending_bytes": len(b"data: cut"),
        "last_event_id": "1",
        "retry": 1500,
        "events": 2,
        "bytes": len(STREAM),
    }
    assert len(lines) == 3


def test_decode_reads_standard_input() -> None:
    proc = agent_gate("sse", "decode", "-", stdin=b"data: x\n\n")
    assert proc.returncode == 0
    assert json.loads(proc.stdout.decode().splitlines()[0])["data"] == "x"


def test_limit_violation_exits_non_zero_with_the_typed_message_only() -> None:
    secret = "sk-live-SECRET"
    proc = agent_gate(
        "sse",
        "decode",
        "-",
        "--max-event-bytes",
        "8",
        stdin=f"data: ok\n\ndata: {secret} {secret}\n\n".encode(),
    )
    assert proc.returncode != 0
    assert json.loads(proc.stdout.decode().splitlines()[0])["data"] == "ok"
    stderr = proc.stderr.decode()
    assert "max_event_bytes=8" in stderr and "event index 1" in stderr
    assert secret not in stderr
