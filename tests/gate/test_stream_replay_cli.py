"""`agent-gate replay`: a recorded stream through the full pipeline, from the shell."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent_gate.cli import main as cli

HERE = Path(__file__).parent
TRANSCRIPTS = HERE.parent / "transcripts"
AGENT_GATE = Path(sys.executable).with_name("agent-gate")


@pytest.fixture
def project(tmp_path: Path, effects_file: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's directory: their tools module next to where they run the command."""
    shutil.copy(HERE.parent / "support" / "agent_tools.py", tmp_path / "my_tools.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENT_GATE_DB", raising=False)
    return tmp_path


def effect_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(AGENT_GATE), "replay", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_replay_twice_executes_nothing_the_second_time(
    project: Path, effects_file: Path
) -> None:
    stream = str(TRANSCRIPTS / "openai_responses" / "parallel_calls.sse")
    first = replay(stream, "--provider", "openai-responses", "--task", "T1",
                   "--tools", "my_tools")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        "call_8fJk2LwQe9  get_weather  succeeded  new",
        "call_R4nd0mW7xt  send_email   succeeded  new",
        "terminal: completed",
    ]
    assert (project / "agent_gate.db").exists()  # the default ledger, in the cwd
    second = replay(stream, "--provider", "openai-responses", "--task", "T1",
                    "--tools", "my_tools:tools", "--json")
    assert second.returncode == 0, second.stderr
    assert [json.loads(line) for line in second.stdout.splitlines()] == [
        {"call_id": "call_8fJk2LwQe9", "tool": "get_weather", "state": "succeeded",
         "replayed": True, "reason": None},
        {"call_id": "call_R4nd0mW7xt", "tool": "send_email", "state": "succeeded",
         "replayed": True, "reason": None},
        {"terminal": "completed", "exit_code": 0},
    ]
    assert effect_lines(effects_file) == ["T1 get_weather Zürich",
                                          "T1 send_email marta@example.org Réunion à 14h"]


def test_replay_reports_calls_that_did_not_run(project: Path, effects_file: Path) -> None:
    url = f"sqlite:///{project / 'l.db'}"
    result = CliRunner().invoke(cli, [
        "replay", str(TRANSCRIPTS / "openai_responses" / "incomplete_max_output_tokens.sse"),
        "--provider", "openai-responses", "--task", "T", "--tools", "my_tools",
        "--db", url, "--json",
    ])
    assert result.exit_code == 4, result.output  # a call never completed: not run
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert lines == [
        {"call_id": "call_M1", "tool": "get_weather", "state": "succeeded", "replayed": False,
         "reason": None},
        {"call_id": "call_M2", "tool": "send_email", "state": "incomplete", "replayed": False,
         "reason": "the arguments never completed (max_output_tokens); not run"},
        {"terminal": "incomplete:max_output_tokens", "exit_code": 4},
    ]
    human = CliRunner().invoke(cli, [
        "replay", str(TRANSCRIPTS / "openai_chat" / "truncated_before_done.sse"),
        "--provider", "openai-chat", "--task", "T2", "--tools", "my_tools", "--db", url,
    ])
    assert human.exit_code == 4, human.output
    assert human.stdout.splitlines() == [
        "call_NoDone11  send_email  incomplete  new  the response ended truncated before "
        "completing; this call waits for a completed response and was not run",
        "terminal: truncated",
    ]
    # Not a terminal: one plain line per change on standard error, as it happened.
    assert human.stderr.splitlines() == [
        "call call_NoDone11 (send_email): received [received]",
        "call call_NoDone11 (send_email): received → incomplete [mark_incomplete]",
    ]
    assert effect_lines(effects_file) == ["T get_weather Lisbon"]


def test_replay_of_a_broken_stream_exits_nonzero_after_reporting(project: Path) -> None:
    good = (TRANSCRIPTS / "openai_responses" / "parallel_calls.sse").read_text("utf-8")
    broken = good.replace("event: response.completed", "event: response.output_text.delta\n"
                          "data: {oops\n\nevent: response.completed")
    (project / "broken.sse").write_text(broken, "utf-8")
    result = CliRunner().invoke(cli, [
        "replay", "broken.sse", "--provider", "openai-responses", "--task", "T",
        "--tools", "my_tools", "--db", f"sqlite:///{project / 'b.db'}",
    ])
    assert result.exit_code == 1
    assert "send_email   incomplete  new  the response ended truncated" in result.output
    assert "terminal: truncated" in result.output
    assert "Error: the stream was abandoned:" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tools", "no_such_module"], "cannot import 'no_such_module'"),
        (["--tools", "my_tools:effect"], "my_tools:effect is not a ToolRegistry"),
        (["--tools", "my_tools", "--provider", "carrier-pigeon"], "'carrier-pigeon' is not one of"),
    ],
)
def test_replay_usage_errors(project: Path, args: list[str], message: str) -> None:
    base = {"--provider": "openai-responses", "--tools": "my_tools"}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    flat = [x for kv in base.items() for x in kv]
    result = CliRunner().invoke(cli, [
        "replay", str(TRANSCRIPTS / "openai_responses" / "single_call.sse"), "--task", "T",
        "--db", f"sqlite:///{project / 'u.db'}", *flat,
    ])
    assert result.exit_code == 2
    assert message in result.output


def test_replay_on_a_terminal_draws_live_progress(project: Path, effects_file: Path) -> None:
    """A real pseudo-terminal: the live view is drawn on standard error (and cleared),
    no plain progress lines; the result lines are printed as without a terminal."""
    import os
    import pty

    master, slave = pty.openpty()
    stream = str(TRANSCRIPTS / "openai_responses" / "parallel_calls.sse")
    proc = subprocess.Popen(
        [str(AGENT_GATE), "replay", stream, "--provider", "openai-responses", "--task", "TT",
         "--tools", "my_tools"],
        stdin=slave, stdout=slave, stderr=slave, env={**os.environ, "COLUMNS": "120"},
    )
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=120) == 0
    shown = b"".join(chunks).decode("utf-8", "replace")
    assert "\x1b[?25l" in shown  # rich's live display hid the cursor while it drew
    assert "task TT · " in shown and "events · 0 heartbeats" in shown
    assert "call call_8fJk2LwQe9 (get_weather):" not in shown  # no plain lines here
    assert "terminal: completed" in shown
