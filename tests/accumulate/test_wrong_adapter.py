"""A stream in which the chosen adapter recognises no event is an error.

Before this, feeding (say) an Anthropic stream to the OpenAI Responses adapter
ended quietly as ``truncated`` with no call: a wrong ``--provider`` looked like
a model that said nothing.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent_gate import Gate, ToolRegistry
from agent_gate.accumulate import UNRECOGNIZED_LIMIT, Accumulator
from agent_gate.calls import TerminalKind
from agent_gate.cli import main as cli
from agent_gate.errors import UnrecognizedStream
from agent_gate.sse import SSEDecoder

TRANSCRIPTS = Path(__file__).parents[1] / "transcripts"

# Each pair was quietly "truncated" before; pairs whose first event is already
# malformed for the adapter were errors already.
MISMATCHED = [
    ("openai-responses", "anthropic/single_tool_use"),
    ("openai-chat", "openai_responses/single_call"),
    ("openai-chat", "anthropic/single_tool_use"),
    ("openai-chat", "gemini/single_call"),
    ("anthropic", "openai_responses/single_call"),
    ("gemini", "openai_responses/single_call"),
    ("gemini", "anthropic/single_tool_use"),
]


def sse(name: str) -> bytes:
    return (TRANSCRIPTS / f"{name}.sse").read_bytes()


@pytest.mark.parametrize(("provider", "transcript"), MISMATCHED)
def test_the_cli_says_the_protocol_is_wrong_and_fails(provider: str, transcript: str) -> None:
    result = CliRunner().invoke(
        cli, ["calls", "--provider", provider, str(TRANSCRIPTS / f"{transcript}.sse")]
    )
    assert result.exit_code == 1
    assert f"of the {provider} protocol" in result.output
    assert "is the provider the right one?" in result.output


@pytest.mark.parametrize(("provider", "transcript"), MISMATCHED)
def test_gate_run_reports_it_and_records_nothing(
    db_url: str, provider: str, transcript: str
) -> None:
    decoder = SSEDecoder()
    events = decoder.feed(sse(transcript))
    decoder.end()
    ran: Counter[str] = Counter()
    tools = ToolRegistry()
    for name in ("get_weather", "send_email"):
        tools.register(lambda name=name, **_: ran.update([name]), name=name,
                       schema={"type": "object"})
    with Gate(tools, db_url) as gate:
        result = gate.run(events, task_id="t", provider=provider)
        assert result.error is not None and "is the provider the right one?" in result.error
        assert result.terminal is not None and result.terminal.kind is TerminalKind.TRUNCATED
        assert result.outcomes == () and gate.ledger.calls("t") == []
    assert ran == Counter()


def test_a_short_stream_of_foreign_events_is_judged_at_close() -> None:
    acc = Accumulator("openai-responses")
    for _ in range(UNRECOGNIZED_LIMIT - 1):
        assert acc.feed({"type": "message_start", "message": {}}) == []
    with pytest.raises(UnrecognizedStream) as caught:
        acc.close()
    assert caught.value.unknown == UNRECOGNIZED_LIMIT - 1


def test_unknown_events_among_recognised_ones_stay_harmless() -> None:
    """A new event type the adapter does not know yet is counted, never fatal, once
    the stream has shown it speaks the protocol (or before, up to the limit)."""
    acc = Accumulator("openai-responses")
    for _ in range(UNRECOGNIZED_LIMIT - 1):
        acc.feed({"type": "response.something_new"})
    acc.feed({"type": "response.created", "response": {"id": "r", "status": "in_progress"}})
    for _ in range(3 * UNRECOGNIZED_LIMIT):
        acc.feed({"type": "response.something_new"})
    acc.feed({"type": "response.completed", "response": {"id": "r", "status": "completed"}})
    assert acc.close() == []
    assert acc.terminal is not None and acc.terminal.kind is TerminalKind.COMPLETED
    assert acc.stats.unknown_types == {"response.something_new": 4 * UNRECOGNIZED_LIMIT - 1}


# -- agent-gate replay: the same error, and the same detection ------------------------

TOOLS_MODULE = '''
from agent_gate import ToolRegistry

tools = ToolRegistry()
ran = []


@tools.tool(schema={"type": "object"}, effect="read")
def get_weather(**arguments):
    ran.append(arguments)
    return {"celsius": 21}
'''


@pytest.fixture
def tools_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "wrong_adapter_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "wrong_adapter_tools", raising=False)
    return tmp_path


@pytest.mark.parametrize(("provider", "transcript"), MISMATCHED)
def test_replay_with_the_wrong_provider_fails_and_runs_nothing(
    tools_dir: Path, provider: str, transcript: str
) -> None:
    db = f"sqlite:///{tools_dir / 'ledger.db'}"
    result = CliRunner().invoke(cli, [
        "replay", str(TRANSCRIPTS / f"{transcript}.sse"), "--provider", provider,
        "--task", "T", "--tools", "wrong_adapter_tools", "--db", db,
    ])
    assert result.exit_code == 1, result.output
    assert f"of the {provider} protocol" in result.output
    assert "is the provider the right one?" in result.output
    assert "terminal: completed" not in result.output
    import wrong_adapter_tools  # type: ignore[import-not-found]

    assert wrong_adapter_tools.ran == []


def test_replay_auto_says_what_it_detected_and_runs_the_call(tools_dir: Path) -> None:
    db = f"sqlite:///{tools_dir / 'ledger.db'}"
    result = CliRunner().invoke(cli, [
        "replay", str(TRANSCRIPTS / "openai_responses" / "single_call.sse"),
        "--provider", "auto", "--task", "T", "--tools", "wrong_adapter_tools", "--db", db,
    ])
    assert result.exit_code == 0, result.output
    assert "provider: detected openai-responses" in result.output
    assert "terminal: completed" in result.output
