"""``agent-gate calls`` over the recorded transcripts, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent_gate.cli import main

ROOT = Path(__file__).resolve().parents[2]
TRANSCRIPTS = ROOT / "tests" / "transcripts"
PROVIDERS = {
    "openai_responses": "openai-responses",
    "openai_chat": "openai-chat",
    "anthropic": "anthropic",
    "gemini": "gemini",
}
CASES = sorted(
    (folder, path.stem) for folder in PROVIDERS for path in (TRANSCRIPTS / folder).glob("*.sse")
)


@pytest.mark.parametrize(("folder", "stem"), CASES, ids=[f"{f}/{s}" for f, s in CASES])
def test_calls_prints_each_call_then_the_terminal(folder: str, stem: str) -> None:
    source = TRANSCRIPTS / folder / f"{stem}.sse"
    expected = (TRANSCRIPTS / folder / f"{stem}.expected.jsonl").read_text("utf-8")
    result = CliRunner().invoke(main, ["calls", str(source), "--provider", PROVIDERS[folder]])
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        json.loads(line) for line in expected.splitlines()
    ]


def agent_gate(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agent_gate", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_the_readme_example_stream_has_a_read_and_a_write_call() -> None:
    proc = agent_gate(
        "calls",
        str(ROOT / "examples" / "streams" / "openai_responses_tool_calls.sse"),
        "--provider",
        "openai-responses",
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines()]
    assert lines == [
        {
            "call_id": "call_wX7pQ2mLs9BdK4vN",
            "name": "get_weather",
            "arguments": {"city": "Paris", "unit": "celsius"},
            "status": "complete",
            "reason": None,
        },
        {
            "call_id": "call_Hn3sV8qTz1RfY6cJ",
            "name": "send_email",
            "arguments": {
                "to": "camille@example.com",
                "subject": "Lunch on Friday",
                "body": "Hi Camille, are you free for lunch on Friday?",
            },
            "status": "complete",
            "reason": None,
        },
        {"terminal": "completed"},
    ]


def test_the_readme_example_stream_carries_event_ids() -> None:
    proc = agent_gate(
        "sse", "decode", str(ROOT / "examples" / "streams" / "openai_responses_tool_calls.sse")
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines()[:-1]]
    assert all(event["id"] for event in events)
    assert events[-1]["event"] == "response.completed"


def test_calls_reads_standard_input() -> None:
    raw = (TRANSCRIPTS / "gemini" / "parallel_calls.sse").read_bytes()
    proc = agent_gate("calls", "-", "--provider", "gemini", stdin=raw)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines()]
    assert [line.get("name") for line in lines] == ["get_weather", "send_email", None]
    assert lines[-1] == {"terminal": "completed"}


def test_a_cut_stream_never_reports_success() -> None:
    raw = (TRANSCRIPTS / "openai_chat" / "single_call.sse").read_bytes()
    cut = raw[: raw.index(b"data: [DONE]")]
    proc = agent_gate("calls", "-", "--provider", "openai-chat", stdin=cut)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().splitlines()[-1] == '{"terminal": "truncated"}'


def test_malformed_event_exits_non_zero_naming_the_event_but_not_its_data() -> None:
    stream = (
        b'data: {"type":"response.created","response":{},"sequence_number":0}\n\n'
        b'data: {"type":"response.output_text.delta","delta":"SECRET-TOKEN-42\n\n'
    )
    proc = agent_gate("calls", "-", "--provider", "openai-responses", stdin=stream)
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert "event at index 1" in err or "index 1" in err
    assert "SECRET-TOKEN-42" not in err


def test_unknown_provider_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["calls", "-", "--provider", "bedrock"], input=b"")
    assert result.exit_code == 2
    assert "openai-responses" in result.output
