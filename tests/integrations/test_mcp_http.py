"""The proxy over Streamable HTTP: an SDK client, a resumed response (``Last-Event-ID``) that
brings the held call's result, a replayed request that never re-runs the tool, and a proxy
whose upstream is itself reached over HTTP (``--upstream-url``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_harness import POLICY, ROOT, Setup

from agent_gate.integrations.mcp.proxy import session_task
from agent_gate.ledger import Ledger

pytestmark = pytest.mark.slow

VERSION = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


def text(result: Any) -> str:
    return " ".join(c.text for c in result.content if c.type == "text")


def events(lines: Any) -> Any:
    """(event id, parsed data) for each SSE event with JSON data."""
    event_id, data = None, ""
    for line in lines:
        if line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()
        elif line == "":
            if data:
                yield event_id, json.loads(data)
            event_id, data = None, ""


def initialized(http: httpx.Client, url: str) -> dict[str, str]:
    """A new session opened with raw HTTP requests; the headers its requests carry."""
    init = http.post(url, headers={"Accept": ACCEPT}, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": VERSION, "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}},
    })
    headers = {"Accept": ACCEPT, "mcp-session-id": init.headers["mcp-session-id"],
               "mcp-protocol-version": VERSION}
    http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return headers


def test_a_resumed_response_brings_the_result_and_a_replayed_request_never_reruns(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path)
    call = {"name": "send_payment", "arguments": {"to": "cy", "cents": 7000},
            "_meta": {"progressToken": "p"}}
    with setup.http_proxy("--approval-wait", "10m") as url, httpx.Client(timeout=60) as http:
        headers = initialized(http, url)
        session = headers["mcp-session-id"]
        request = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}
        last = None
        with http.stream("POST", url, headers=headers, json=request) as held:
            for event_id, data in events(held.iter_lines()):
                last = event_id
                if data.get("method") == "notifications/progress":
                    break  # the connection drops while the call waits
        assert last is not None
        task = session_task(session)
        with Ledger(setup.db) as ledger:
            (waiting,) = ledger.calls(task)
        assert waiting.state.value == "awaiting_approval" and setup.lines() == []
        assert setup.cli("approve", waiting.call_id, "--task", task, "--by", "ana").returncode == 0
        resumed = {**headers, "Accept": "text/event-stream", "Last-Event-ID": last}
        with http.stream("GET", url, headers=resumed) as stream:
            answer = next(data for _, data in events(stream.iter_lines()) if data.get("id") == 2)
        assert answer["result"]["content"][0]["text"] == "paid, 1 lines"
        assert answer["result"]["_meta"]["agent-gate/call-id"] == waiting.call_id
        # The same request sent again (a client that never saw the answer): from the ledger.
        again = http.post(url, headers=headers, json={**request, "id": 3})
        (_, replay), *_ = [e for e in events([*again.text.splitlines(), ""]) if e[1].get("id") == 3]
        assert replay["result"]["_meta"]["agent-gate/replayed"] is True
    assert setup.lines() == ["pay:cy:7000"]


def test_an_sdk_client_over_http_and_a_proxy_in_front_of_an_http_upstream(tmp_path: Path) -> None:
    setup = Setup(tmp_path)

    async def direct(url: str) -> None:
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            first = await client.call_tool("append_note", {"text": "web"})
            again = await client.call_tool("append_note", {"text": "web"})
            assert text(first) == text(again) == "appended, 1 lines"
            assert (again.meta or {})["agent-gate/task"] == "web"

    async def chained(url: str) -> None:
        args = ["-m", "agent_gate", "mcp", "proxy", "--policy", str(POLICY), "--db",
                f"sqlite:///{tmp_path / 'outer.db'}", "--task", "outer", "--upstream-url", url]
        params = StdioServerParameters(command=sys.executable, args=args, env=setup.env,
                                       cwd=str(ROOT))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            listed = {t.name for t in (await client.list_tools()).tools}
            assert "unlisted" not in listed and "append_note" in listed
            out = await client.call_tool("append_note", {"text": "chained"})
            assert text(out) == "appended, 2 lines"
            denied = await client.call_tool("wipe", {"target": "all"})
            assert denied.is_error

    with setup.http_proxy("--task", "web") as url:
        anyio.run(direct, url)
        anyio.run(chained, url)
    assert setup.lines() == ["note:web", "note:chained"]


def test_after_a_proxy_restart_the_session_resumes_and_the_ledger_answers(
    tmp_path: Path,
) -> None:
    """Both survive a restart: the session and its events (the old session id resumes
    its stream, and is sent the approved call's result), and the ledger (a new session
    sending the call again in the same ``--task`` is answered from it)."""
    setup = Setup(tmp_path)
    call = {"name": "send_payment", "arguments": {"to": "di", "cents": 8000},
            "_meta": {"progressToken": "p"}}
    with setup.http_proxy("--task", "shop") as url, httpx.Client(timeout=60) as http:
        headers = initialized(http, url)
        request = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}
        with http.stream("POST", url, headers=headers, json=request) as held:
            last = next(event_id for event_id, data in events(held.iter_lines())
                        if data.get("method") == "notifications/progress")
    # The proxy process is gone; the call waits in the ledger.
    with Ledger(setup.db) as ledger:
        (waiting,) = ledger.calls("shop")
    assert waiting.state.value == "awaiting_approval"
    assert setup.cli("approve", waiting.call_id, "--task", "shop", "--by", "ana").returncode == 0

    async def resend(url: str) -> None:
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            paid = await client.call_tool("send_payment", {"to": "di", "cents": 8000})
            again = await client.call_tool("send_payment", {"to": "di", "cents": 8000})
            assert text(paid) == text(again) == "paid, 1 lines"
            assert (paid.meta or {})["agent-gate/call-id"] == waiting.call_id
            assert (again.meta or {})["agent-gate/replayed"] is True

    with setup.http_proxy("--task", "shop") as url, httpx.Client(timeout=60) as http:
        resumed = http.get(url, headers={**headers, "Accept": "text/event-stream",
                                         "Last-Event-ID": last})
        (answer,) = [data for _, data in events([*resumed.text.splitlines(), ""])
                     if data.get("id") == 2]
        assert answer["result"]["content"][0]["text"] == "paid, 1 lines"
        anyio.run(resend, url)
    assert setup.lines() == ["pay:di:8000"]
