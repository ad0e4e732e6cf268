"""``agent-gate run`` against live endpoints on loopback.

In-process (CliRunner) against agent-gate's fault-injecting server, and once
fully out of process: the standalone server (``python -m agent_gate.stream_server``)
and the command as a user types it, with the fault given as query parameters.
A small capturing server checks what was actually sent (headers, method, body)
and that header values, which carry API keys, are never printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner

from agent_gate.cli import main
from agent_gate.stream_server import (
    Fault,
    FaultRule,
    HeartbeatKind,
    IdMode,
    StreamServer,
    Transcript,
)

from .conftest import HERE, Case, cases

SECRET = "sk-test-0123456789abcdefSECRET"
DEMO = next(c for c in cases() if c.name.startswith("demo/"))
EXAMPLE_POLICY = HERE.parents[1] / "policies" / "example.yaml"


@pytest.fixture
def cli(e2e_tools: ModuleType, effects: Path, db_url: str) -> Any:
    runner = CliRunner()

    def invoke(*args: str) -> Any:
        base = ["run", "--tools", "e2e_tools", "--db", db_url, "--task", "t"]
        return runner.invoke(main, [*base, *args], catch_exceptions=False)

    return invoke


def run_args(case: Case, url: str) -> list[str]:
    return ["--provider", case.provider, "--url", url]


def test_run_resumes_a_cut_stream_and_a_second_run_replays_from_the_ledger(
    cli: Any, e2e_tools: ModuleType, effects: Path
) -> None:
    rules = [FaultRule(Fault(cut_inside_event=20))]
    with StreamServer({"s": DEMO.transcript}, faults=rules, join_timeout=2.0) as server:
        first = cli(*run_args(DEMO, server.stream_url("s")))
        second = cli(*run_args(DEMO, server.stream_url("s")))
    assert first.exit_code == 0, first.output
    lines = first.stdout.splitlines()
    # Without --policy every registered tool with valid arguments is allowed.
    assert [line.split()[:4] for line in lines[:4]] == [
        ["call_weather", "get_weather", "succeeded", "new"],
        ["call_mail_team", "send_email", "succeeded", "new"],
        ["call_mail_partner", "send_email", "succeeded", "new"],
        ["call_cleanup", "delete_file", "succeeded", "new"],
    ]
    assert "terminal: completed" in lines
    assert "over 2 connection(s), 19 replayed after a reconnect" in first.output
    # Not a terminal: one plain line per change on standard error, while it ran.
    progress = first.stderr.splitlines()
    assert "call call_weather (get_weather): authorized → executing [claim]" in progress
    assert "call call_cleanup (delete_file): executing → succeeded [succeed]" in progress
    cut = next(i for i, line in enumerate(progress) if line.startswith("stream: reconnect #1"))
    assert "after event id" in progress[cut]
    # The reconnect line comes after the calls the first connection already ran.
    assert progress.index("call call_weather (get_weather): executing → succeeded [succeed]") \
        < cut
    assert second.exit_code == 0
    assert [line.split()[3] for line in second.stdout.splitlines()[:4]] == ["replayed"] * 4
    assert dict(e2e_tools.executions(effects, "t")) == {c: 1 for c in DEMO.complete}


def test_run_with_the_example_policy_runs_only_what_it_allows(
    cli: Any, e2e_tools: ModuleType, effects: Path
) -> None:
    with StreamServer({"s": DEMO.transcript}, join_timeout=2.0) as server:
        result = cli(*run_args(DEMO, server.stream_url("s")), "--policy", str(EXAMPLE_POLICY),
                     "--json")
    assert result.exit_code == 5, result.output  # call_mail_partner awaits approval
    rows = [json.loads(line) for line in result.output.splitlines()]
    states = {r["call_id"]: r["state"] for r in rows if "call_id" in r}
    assert states == {
        "call_weather": "succeeded",
        "call_mail_team": "succeeded",
        "call_mail_partner": "awaiting_approval",
        "call_cleanup": "rejected",
    }
    summary = rows[-1]
    assert summary["terminal"] == "completed" and summary["error"] is None
    assert summary["exit_code"] == 5
    assert summary["stream"]["connections"] == 1
    assert dict(e2e_tools.executions(effects, "t")) == {"call_weather": 1, "call_mail_team": 1}


def test_run_resumes_openai_background_mode_without_resending_the_post(
    cli: Any, e2e_tools: ModuleType, effects: Path, tmp_path: Path
) -> None:
    """POST creates the response; after the cut the rest is read with a GET from the
    last sequence number (the SSE events of this API carry no ids)."""
    bare = Transcript(DEMO.transcript.events, id_mode=IdMode.NONE)
    body = tmp_path / "create.json"
    body.write_text('{"model": "gpt-4.1", "stream": true, "background": true}')
    rules = [FaultRule(Fault(cut_inside_event=20))]
    with StreamServer({"s": bare}, faults=rules, join_timeout=2.0) as server:
        result = cli("--provider", "openai-responses", "--url", server.openai_url("s"),
                     "--body", str(body), "--resume", "openai-background")
        requests = server.requests
    assert result.exit_code == 0, result.output
    assert [r.method for r in requests] == ["POST", "GET"]
    assert requests[1].path == "/openai/s/v1/responses/resp_demo_4calls"
    assert requests[1].query == {"stream": "true", "starting_after": "19"}
    assert "terminal: completed" in result.output
    assert dict(e2e_tools.executions(effects, "t")) == {c: 1 for c in DEMO.complete}


def test_openai_background_resume_is_for_openai_responses_only(cli: Any) -> None:
    result = cli("--provider", "anthropic", "--url", "http://127.0.0.1:9/v1/messages",
                 "--resume", "openai-background")
    assert result.exit_code == 2 and "OpenAI Responses streams only" in result.output


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (Fault(content_type="application/json"), "not text/event-stream"),
        (Fault(status=429), "HTTP 429"),
        (Fault(status=500), "HTTP 500"),
        (Fault(status=529), "HTTP 529"),
    ],
    ids=["content_type", "429", "500", "529"],
)
def test_run_reports_a_refused_stream_and_runs_nothing(
    cli: Any, effects: Path, fault: Fault, message: str
) -> None:
    with StreamServer({"s": DEMO.transcript}, faults=[FaultRule(fault, times=None)]) as server:
        result = cli(*run_args(DEMO, server.stream_url("s")),
                     "--header", f"Authorization: Bearer {SECRET}")
    assert result.exit_code == 1
    assert message in result.output and "the stream was abandoned" in result.output
    assert "terminal: truncated" in result.output
    assert SECRET not in result.output
    assert not effects.exists()


def test_run_times_out_when_only_heartbeats_flow(cli: Any, e2e_tools: ModuleType,
                                                 effects: Path) -> None:
    stall = Fault(stall_after_events=len(DEMO.transcript) - 1, stall_seconds=5,
                  heartbeat_interval=0.05, heartbeat=HeartbeatKind.PING)
    with StreamServer({"s": DEMO.transcript}, faults=[FaultRule(stall)]) as server:
        # 1.5 s without progress, well inside the 5 s stall: a loaded machine (the read's
        # tool runs and commits meanwhile) must not trip it before the stall begins.
        result = cli(*run_args(DEMO, server.stream_url("s")), "--progress-timeout", "1.5",
                     "--idle-timeout", "3")
    assert result.exit_code == 1
    assert "progress_timeout=1.5s exceeded" in result.output
    assert "heartbeats) over 1 connection(s)" in result.output
    # The read ran when its call completed; every write waited and was not run.
    assert dict(e2e_tools.executions(effects, "t")) == {"call_weather": 1}
    states = {line.split()[0]: line.split()[2] for line in result.stdout.splitlines()[:4]}
    # Each heartbeat showed while the stream stalled (standard error, not a terminal).
    assert "stream: heartbeat (1 so far," in result.stderr
    assert states["call_mail_team"] == "incomplete"


def test_run_times_out_on_a_silent_server(cli: Any, effects: Path) -> None:
    stall = Fault(stall_after_events=3, stall_seconds=5)
    with StreamServer({"s": DEMO.transcript}, faults=[FaultRule(stall)]) as server:
        result = cli(*run_args(DEMO, server.stream_url("s")), "--idle-timeout", "0.3")
    assert result.exit_code == 1
    assert "idle_timeout=0.3s exceeded" in result.output
    assert not effects.exists()


# ------------------------------------------------- what is sent, what is printed


class _Capture(BaseHTTPRequestHandler):
    """Records each request and answers with the demo stream, whole."""

    protocol_version = "HTTP/1.1"
    seen: list[dict[str, Any]]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append(  # type: ignore[attr-defined]
            {"method": self.command, "headers": dict(self.headers.items()), "body": body}
        )
        payload, _ = DEMO.transcript.encoded()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _answer
    do_POST = _answer


@pytest.fixture
def capture() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    httpd.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        host, port = httpd.server_address[:2]
        yield f"http://{host}:{port}/v1/responses", httpd.seen  # type: ignore[attr-defined]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def test_run_sends_headers_and_body_and_never_prints_them(
    cli: Any, capture: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, seen = capture
    body = tmp_path / "request.json"
    body.write_text('{"model": "gpt-4.1", "stream": true}', encoding="utf-8")
    result = cli(*run_args(DEMO, url), "--body", str(body),
                 "--header", f"Authorization: Bearer {SECRET}",
                 "--header", "OpenAI-Beta: responses=v1", "--json")
    assert result.exit_code == 0, result.output
    [request] = seen
    assert request["method"] == "POST"
    assert request["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert request["headers"]["OpenAI-Beta"] == "responses=v1"
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["headers"]["Accept"] == "text/event-stream"
    assert request["body"] == body.read_bytes()
    assert SECRET not in result.output


def test_a_malformed_header_is_named_by_position_not_by_value(cli: Any) -> None:
    result = cli(*run_args(DEMO, "http://127.0.0.1:9/x"), "--header", f"Bearer{SECRET}")
    assert result.exit_code == 2
    assert "header #1 is not NAME:VALUE" in result.output
    assert SECRET not in result.output


# ------------------------------------------------------------ out of process


@pytest.mark.slow
def test_the_commands_as_a_user_types_them(tmp_path: Path, effects: Path) -> None:
    """Standalone server, fault as query parameters, the CLI in its own process."""
    transcript = tmp_path / "stream.sse"
    payload, _ = DEMO.transcript.encoded()
    transcript.write_bytes(payload)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    server = subprocess.Popen(
        [sys.executable, "-m", "agent_gate.stream_server", f"demo={transcript}",
         "--seconds", "60"],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # "demo: http://127.0.0.1:PORT/streams/demo"
        url = line.split(": ", 1)[1].strip() + "?cut_inside_event=12&times=1"
        db = f"sqlite:///{tmp_path / 'ledger.db'}"
        command = [sys.executable, "-m", "agent_gate", "run", "--provider", "openai-responses",
                   "--url", url, "--task", "cli", "--tools", "e2e_tools", "--db", db,
                   "--header", f"x-api-key: {SECRET}"]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert done.returncode == 0, done.stderr
    assert "terminal: completed" in done.stdout
    assert "over 2 connection(s)" in done.stdout
    assert SECRET not in done.stdout + done.stderr
    lines = effects.read_text(encoding="utf-8").splitlines()
    # No --policy: all four complete calls ran, each once, across the cut.
    assert sorted(line.split()[1] for line in lines) == sorted(DEMO.complete)


def test_run_with_provider_auto_detects_the_protocol_across_a_cut(
    cli: Any, e2e_tools: ModuleType, effects: Path
) -> None:
    """``--provider auto`` on a live stream cut early: the protocol is told from the
    first events (the transport's end-of-response check detects it too), the replayed
    events after the reconnect are recognised, and every call runs once."""
    rules = [FaultRule(Fault(cut_inside_event=3))]
    with StreamServer({"s": DEMO.transcript}, faults=rules, join_timeout=2.0) as server:
        result = cli("--provider", "auto", "--url", server.stream_url("s"))
    assert result.exit_code == 0, result.output
    assert f"provider: detected {DEMO.provider}" in result.output
    assert "terminal: completed" in result.output
    assert dict(e2e_tools.executions(effects, "t")) == {c: 1 for c in DEMO.complete}


SHADOW_DRAFT = """\
version: 1
tools:
  get_weather:
    rules: [{id: draft-no-weather, effect: deny}]
"""


def test_run_records_a_shadow_policy_beside_the_enforced_one(
    cli: Any, e2e_tools: ModuleType, effects: Path, db_url: str, tmp_path: Path
) -> None:
    """``--shadow FILE``: the draft's would-be decision lands in each call's audit
    entry; the enforced policy alone decides what runs."""
    draft = tmp_path / "draft.yaml"
    draft.write_text(SHADOW_DRAFT, encoding="utf-8")
    with StreamServer({"s": DEMO.transcript}) as server:
        result = cli(*run_args(DEMO, server.stream_url("s")), "--policy", str(EXAMPLE_POLICY),
                     "--shadow", str(draft), "--json")
    assert result.exit_code == 5, result.output
    assert dict(e2e_tools.executions(effects, "t")) == {"call_weather": 1, "call_mail_team": 1}
    from agent_gate.ledger import Ledger

    with Ledger(db_url) as ledger:
        entries = ledger.audit("t", call_id="call_weather")
    decided = [e for e in entries if e.to_state == "authorized"]
    assert len(decided) == 1
    shadow = decided[0].detail["shadow"]
    assert shadow["verdict"] == "deny" and shadow["rule_ids"] == ["draft-no-weather"]
    assert shadow["differs"] is True
    # --shadow without --policy is a usage error, not a silently ignored draft
    with StreamServer({"s": DEMO.transcript}) as server:
        alone = cli(*run_args(DEMO, server.stream_url("s")), "--shadow", str(draft))
    assert alone.exit_code == 2 and "--shadow needs --policy" in alone.output
