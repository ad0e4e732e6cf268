"""Red team of ``agent-gate mcp proxy --listen``: sessions that share nothing, resumes that
bring a client its own stream and nothing else, after a SIGKILL of the proxy too, held
approvals whose client went away, and an event table that stays within its bounds.

Real parts throughout: the proxy as its own process on a loopback port in front of the
real upstream (``mcp_upstream.py``), the MCP SDK's own ``streamable_http_client`` for
the clients (raw ``httpx`` where a test must send exactly one header), the ledger on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import mcp.types as mt
import pytest
from click.testing import CliRunner
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import ClientMessageMetadata
from mcp_harness import POLICY, ROOT, Setup, _accepts
from waiting import wait_until

from agent_gate.cli import main as cli_main
from agent_gate.integrations.mcp import ProxyConfig
from agent_gate.integrations.mcp.proxy import session_task
from agent_gate.ledger import Ledger
from agent_gate.ledger.mcp_events import EventBounds, EventKind, McpEventLog

VERSION = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
PAY = {"name": "send_payment", "arguments": {"to": "cy", "cents": 7000},
       "_meta": {"progressToken": "p"}}


def sse(lines: Any) -> list[tuple[str | None, dict[str, Any]]]:
    """(event id, parsed data) of each SSE event with JSON data, in order."""
    out: list[tuple[str | None, dict[str, Any]]] = []
    event_id, data = None, ""
    for line in [*lines, ""]:
        if line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()
        elif line == "":
            if data:
                out.append((event_id, json.loads(data)))
            event_id, data = None, ""
    return out


@contextmanager
def proxy_on(setup: Setup, port: int, *options: str) -> Iterator[subprocess.Popen[bytes]]:
    """The proxy serving Streamable HTTP on ``port``; SIGKILLed on exit if still alive."""
    proc = subprocess.Popen(
        [sys.executable, *setup.proxy_args("--listen", f"127.0.0.1:{port}", *options)],
        env=setup.env, cwd=str(ROOT),
    )
    try:
        wait_until(lambda: _accepts(port, proc), what=f"the proxy to listen on {port}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)


def event_ids(text: str) -> list[str]:
    """Every event id of an SSE body, the priming event's (no data) included."""
    return [line[3:].strip() for line in text.splitlines() if line.startswith("id:")]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def open_session(http: httpx.Client, url: str) -> dict[str, str]:
    """A session opened with raw requests (initialize id 1); the headers it sends."""
    init = http.post(url, headers={"Accept": ACCEPT}, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": VERSION, "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}},
    })
    assert init.status_code == 200, init.text
    headers = {"Accept": ACCEPT, "mcp-session-id": init.headers["mcp-session-id"],
               "mcp-protocol-version": VERSION}
    http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return headers


@dataclass(frozen=True)
class Resumed:
    """What a resuming GET was answered: its status, headers and SSE text."""

    status_code: int
    headers: httpx.Headers
    text: str


def resume(http: httpx.Client, url: str, headers: dict[str, str], last: str) -> Resumed:
    """A GET that resumes a stream after ``last``, read up to a response or its end."""
    lines: list[str] = []
    with http.stream("GET", url, headers={**headers, "Accept": "text/event-stream",
                                          "Last-Event-ID": last}) as answer:
        for line in answer.iter_lines():
            lines.append(line)
            if line == "" and any(("result" in d or "error" in d) and "method" not in d
                                  for _, d in sse(lines)):
                break  # a response ends the stream (a stream held open sends no more)
        return Resumed(answer.status_code, answer.headers, "\n".join(lines))


def messages(response: Resumed) -> list[dict[str, Any]]:
    return [data for _, data in sse(response.text.splitlines())]


async def sdk_call(session: ClientSession, name: str, arguments: dict[str, Any],
                   tokens: list[str]) -> mt.CallToolResult:
    """``tools/call`` through the SDK client, collecting the stream's event ids."""
    async def seen(token: str) -> None:
        tokens.append(token)

    request = mt.CallToolRequest(params=mt.CallToolRequestParams(name=name, arguments=arguments))
    return await session.send_request(
        request, mt.CallToolResult, metadata=ClientMessageMetadata(on_resumption_token_update=seen))


def result_text(message: dict[str, Any]) -> str:
    return " ".join(c["text"] for c in message["result"]["content"] if c["type"] == "text")


@pytest.mark.slow
def test_two_sdk_clients_with_the_same_request_ids_resume_only_their_own_streams(
    tmp_path: Path, db_url: str,
) -> None:
    """Both SDK clients number their requests alike (initialize 0, the call 1); while
    both sessions are open, the second resumes with each of the first one's event ids
    under its own session: it is sent nothing of the first's stream, and no session id
    but its own. The first resumes its own stream."""
    setup = Setup(tmp_path, url=db_url)
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"

    async def main(http: httpx.Client) -> None:
        alice_ids: list[str] = []
        bob_ids: list[str] = []
        sessions: dict[str, str] = {}
        async with (
            sdk_client(url, sessions, "alice") as alice,
            sdk_client(url, sessions, "bob") as bob,
        ):
            mine = await sdk_call(alice, "append_note", {"text": "alice-secret"}, alice_ids)
            theirs = await sdk_call(bob, "append_note", {"text": "bob"}, bob_ids)
            secret = (mine.meta or {})["agent-gate/call-id"]  # alice's, in alice's task
            assert secret not in json.dumps(theirs.model_dump(mode="json"))
            assert alice_ids and bob_ids and not set(alice_ids) & set(bob_ids)
            as_bob = {"Accept": ACCEPT, "mcp-session-id": sessions["bob"],
                      "mcp-protocol-version": VERSION}
            as_alice = {**as_bob, "mcp-session-id": sessions["alice"]}
            for last in alice_ids:
                stolen = await anyio.to_thread.run_sync(resume, http, url, as_bob, last)
                assert stolen.status_code == 200 and messages(stolen) == []
                assert secret not in stolen.text and "appended" not in stolen.text
                assert stolen.headers.get("mcp-session-id") == sessions["bob"]
            own = await anyio.to_thread.run_sync(resume, http, url, as_alice, alice_ids[0])
            assert secret in own.text

    with proxy_on(setup, port), httpx.Client(timeout=30) as http:
        anyio.run(main, http)
    assert setup.lines() == ["note:alice-secret", "note:bob"]


@asynccontextmanager
async def sdk_client(url: str, sessions: dict[str, str], name: str) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session; its session id lands in ``sessions[name]``."""
    async def seen(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            sessions[name] = response.headers["mcp-session-id"]

    async with (
        create_mcp_http_client() as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        http.event_hooks["response"].append(seen)
        await session.initialize()
        yield session


@pytest.mark.slow
def test_raw_sessions_with_the_same_ids_guessed_event_ids_and_made_up_sessions_get_nothing(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "append_note", "arguments": {"text": "mine"}}}
    with proxy_on(setup, port), httpx.Client(timeout=30) as http:
        mine, theirs = open_session(http, url), open_session(http, url)
        answered = http.post(url, headers=mine, json=call)
        ids = event_ids(answered.text)
        assert [d["result"] for _, d in sse(answered.text.splitlines())][-1]
        # The other session, resuming with this stream's ids: nothing.
        for last in ids:
            assert messages(resume(http, url, theirs, last)) == []
        # Not counted: no id is a number; ids are long random strings.
        assert ids and not any(i.isdigit() for i in ids) and min(len(i) for i in ids) >= 32
        assert len(mine["mcp-session-id"]) >= 43  # secrets.token_urlsafe(32)
        # Guessed and counted ids, in either session: nothing.
        changed = ids[0][:-1] + ("B" if ids[0].endswith("A") else "A")  # one character off
        for guess in [*map(str, range(1, 40)), changed, "0" * 32]:
            for headers in (mine, theirs):
                assert messages(resume(http, url, headers, guess)) == []
        # Its own session resumes it.
        own = messages(resume(http, url, mine, ids[0]))
        assert [m["result"]["content"][0]["text"] for m in own if "result" in m] == [
            "appended, 1 lines"]
        # A made-up session id (or one of the right form) is not a session.
        for made_up in ("1", "x" * 43, mine["mcp-session-id"][:-1] + "Z"):
            answer = http.post(url, headers={**mine, "mcp-session-id": made_up},
                               json={**call, "id": 9})
            assert answer.status_code == 404
        # The task the calls are recorded in does not show the session id.
        with Ledger(setup.db) as ledger:
            (rec,) = ledger.calls(session_task(mine["mcp-session-id"]))
            assert mine["mcp-session-id"] not in rec.task_id
    assert setup.lines() == ["note:mine"]


@pytest.mark.slow
def test_a_stream_resumes_after_the_proxy_is_killed_and_the_tool_never_runs_twice(
    tmp_path: Path, db_url: str,
) -> None:
    """SIGKILL while a call waits for approval and after another finished; the proxy is
    started again on the same ledger and port: each stream resumes with its own
    ``Last-Event-ID`` under the old session id, the waiting call is answered once
    approved, the finished one from the stored events; each tool ran once."""
    setup = Setup(tmp_path, url=db_url)
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    note = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "append_note", "arguments": {"text": "before"}}}
    held = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": PAY}
    with httpx.Client(timeout=60) as http:
        with proxy_on(setup, port, "--approval-wait", "10m") as proc:
            headers = open_session(http, url)
            done = http.post(url, headers=headers, json=note)
            done_first = event_ids(done.text)[0]  # the priming event: before the answer
            with http.stream("POST", url, headers=headers, json=held) as stream:
                for event_id, data in sse_lines(stream):
                    if data.get("method") == "notifications/progress":
                        waiting_at = event_id
                        break
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        task = session_task(headers["mcp-session-id"])
        with Ledger(setup.db) as ledger:
            (_, waiting) = sorted(ledger.calls(task), key=lambda r: r.tool == "send_payment")
        assert waiting.state.value == "awaiting_approval"
        assert setup.cli("approve", waiting.call_id, "--task", task, "--by", "ana").returncode == 0
        with proxy_on(setup, port, "--approval-wait", "10m"):
            assert waiting_at is not None
            paid = messages(resume(http, url, headers, waiting_at))
            (answer,) = [m for m in paid if m.get("id") == 3]
            assert result_text(answer) == "paid, 2 lines"
            assert answer["result"]["_meta"]["agent-gate/call-id"] == waiting.call_id
            again = messages(resume(http, url, headers, waiting_at))
            assert [m for m in again if m.get("id") == 3] == [answer]  # stored: not run again
            (noted,) = [m for m in messages(resume(http, url, headers, done_first))
                        if m.get("id") == 2]
            assert result_text(noted) == "appended, 1 lines"
            # The adopted session takes new requests, in the same task.
            more = http.post(url, headers=headers, json={**note, "id": 4})
            (replayed,) = [d for _, d in sse(more.text.splitlines()) if d.get("id") == 4]
            assert replayed["result"]["_meta"]["agent-gate/replayed"] is True
            # A session its client deleted is gone, after a restart too.
            assert http.delete(url, headers=headers).status_code == 200
            assert resume(http, url, headers, done_first).status_code == 404
        with proxy_on(setup, port):
            assert resume(http, url, headers, done_first).status_code == 404
    assert setup.lines() == ["note:before", "pay:cy:7000"]


@pytest.mark.slow
def test_a_redacted_call_is_never_stored_in_clear_and_its_resume_after_a_restart_asks_again(
    tmp_path: Path,
) -> None:
    """The request of a tool whose fields the policy redacts is not kept (its arguments
    would be in the database in clear): after a SIGKILL its resumed stream is answered
    with an error telling the client to send it again, which the ledger answers."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.read_text().replace(
        "  send_payment:\n", "  send_payment:\n    redact: [to]\n", 1))
    setup = Setup(tmp_path, policy=policy)
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    secret = "iban-DE4450050000123456789"
    call = {"name": "send_payment", "arguments": {"to": secret, "cents": 7000},
            "_meta": {"progressToken": "p"}}
    held = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}
    with httpx.Client(timeout=60) as http:
        with proxy_on(setup, port, "--approval-wait", "10m") as proc:
            headers = open_session(http, url)
            with http.stream("POST", url, headers=headers, json=held) as stream:
                waiting_at = next(i for i, d in sse_lines(stream)
                                  if d.get("method") == "notifications/progress")
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        with Ledger(setup.db) as ledger, ledger.engine.begin() as conn:
            stored = [m for (m,) in conn.exec_driver_sql("SELECT message FROM mcp_events")]
        assert stored and not any(secret in (m or "") for m in stored)
        with proxy_on(setup, port, "--approval-wait", "10m"):
            (answer,) = [m for m in messages(resume(http, url, headers, waiting_at))
                         if m.get("id") == 2]
            assert "send it again" in answer["error"]["message"]
            task = session_task(headers["mcp-session-id"])
            with Ledger(setup.db) as ledger:
                (waiting,) = ledger.calls(task)
            assert setup.cli("approve", waiting.call_id, "--task", task,
                             "--by", "ana").returncode == 0
            again = http.post(url, headers=headers, json={**held, "id": 3})
            (paid,) = [d for _, d in sse(again.text.splitlines()) if d.get("id") == 3]
            assert result_text(paid) == "paid, 1 lines"
    assert setup.lines() == [f"pay:{secret}:7000"]


def sse_lines(stream: httpx.Response) -> Iterator[tuple[str | None, dict[str, Any]]]:
    """(event id, data) of each event of a live SSE response, as it arrives."""
    event_id, data = None, ""
    for line in stream.iter_lines():
        if line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()
        elif line == "":
            if data:
                yield event_id, json.loads(data)
            event_id, data = None, ""


@pytest.mark.slow
def test_a_held_call_whose_request_is_cancelled_never_runs_until_sent_again(
    tmp_path: Path,
) -> None:
    """The client gives up (``notifications/cancelled``, as a client whose timeout
    fired sends): the hold ends with the request; the approval given afterwards is
    recorded and binds the call, which runs only when the same call is sent again."""
    setup = Setup(tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    held = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": PAY}
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
              "params": {"requestId": 2, "reason": "Request timed out"}}
    with proxy_on(setup, port, "--approval-wait", "10m"), httpx.Client(timeout=60) as http:
        headers = open_session(http, url)
        ended: list[dict[str, Any]] = []
        with http.stream("POST", url, headers=headers, json=held) as stream:
            for _, data in sse_lines(stream):
                if data.get("method") == "notifications/progress" and not ended:
                    ended.append(data)
                    assert http.post(url, headers=headers, json=cancel).status_code == 202
                elif data.get("id") == 2:
                    ended.append(data)
                    break
        # The request's handler ended: the SDK answers a cancelled request so.
        assert ended[-1]["error"]["code"] == -32800
        task = session_task(headers["mcp-session-id"])
        with Ledger(setup.db) as ledger:
            (waiting,) = ledger.calls(task)
        assert waiting.state.value == "awaiting_approval"
        assert setup.cli("approve", waiting.call_id, "--task", task, "--by", "ana").returncode == 0
        # Nobody holds the call any more: approved, it is not run by itself.
        assert setup.state(task, waiting.call_id) == "awaiting_approval"
        assert setup.lines() == []
        again = http.post(url, headers=headers, json={**held, "id": 3})
        (answer,) = [d for _, d in sse(again.text.splitlines()) if d.get("id") == 3]
        assert result_text(answer) == "paid, 1 lines"
        assert answer["result"]["_meta"]["agent-gate/call-id"] == waiting.call_id
    assert setup.lines() == ["pay:cy:7000"]


def test_the_default_hold_ends_before_a_60_second_client_timeout() -> None:
    """The TypeScript SDK gives a request 60 s: a call held longer by default reached
    such a client as "Request timed out", not as the result naming the waiting call."""
    assert ProxyConfig().approval_wait < 60
    assert ProxyConfig().progress_every < 60
    shown = CliRunner().invoke(cli_main, ["mcp", "proxy", "--help"], terminal_width=200)
    assert shown.exit_code == 0
    default = shown.output.split("--approval-wait", 1)[1].split("[default: ", 1)[1].split("]")[0]
    assert default == "50s"


def test_the_event_table_keeps_sessions_apart_and_within_its_bounds(db_url: str) -> None:
    with Ledger(db_url) as ledger:
        log = McpEventLog(ledger.engine, EventBounds(max_bytes=2000, max_age=60))
        log.open_session("s-a", '{"method": "initialize"}')
        log.open_session("s-b", '{"method": "initialize"}')
        first = log.append("s-a", "2", EventKind.EVENT, None)
        ids = [log.append("s-a", "2", EventKind.EVENT, json.dumps({"n": n, "pad": "x" * 90}))
               for n in range(10)]
        other = log.append("s-b", "2", EventKind.EVENT, json.dumps({"n": "b"}))
        # Scoped: one session's ids are nothing to another, whatever the stream id.
        found = log.find("s-a", first)
        assert found is not None and found[0] == "2" and found[1].message is None
        assert log.find("s-b", first) is None and log.find("s-a", other) is None
        assert [json.loads(e.message or "{}").get("n") for e in log.after("s-b", "2", 0)] == ["b"]
        assert [json.loads(e.message or "null")["n"] for e in log.after("s-a", "2", found[1].seq)
                if e.message] == list(range(10))
        # Size: 40 more events of ~100 bytes; the oldest go first, the newest stay.
        more = [log.append("s-a", "3", EventKind.EVENT, json.dumps({"m": m, "pad": "y" * 90}))
                for m in range(40)]
        log.prune()
        with ledger.engine.begin() as conn:
            total = conn.exec_driver_sql(
                "SELECT SUM(size) FROM mcp_events WHERE kind <> 'session'").scalar_one()
        assert 0 < int(total) <= 2000
        assert log.find("s-a", ids[0]) is None and log.find("s-a", more[-1]) is not None
        # The sessions themselves are kept while they have events, then age out.
        assert log.session("s-a") is not None
        now_ms = 10**13
        assert log.prune(now_ms=now_ms) > 0
        assert log.session("s-a") is None and log.find("s-a", more[-1]) is None
        # Ending a session forgets it at once.
        log.open_session("s-c", "{}")
        log.append("s-c", "1", EventKind.EVENT, "{}")
        assert log.end_session("s-c") == 2 and log.session("s-c") is None


def test_bounds_must_be_positive() -> None:
    from agent_gate.errors import GateUsageError

    for bad in ({"max_bytes": 0}, {"max_age": 0.0}, {"max_age": float("inf")}):
        with pytest.raises(GateUsageError):
            EventBounds(**bad)  # type: ignore[arg-type]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q", "-n", "0", *os.environ.get("ARGS", "").split()]))
