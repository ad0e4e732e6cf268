"""Sampling requests through the proxy: each a call of its own in the ledger, judged by
the policy's ``mcp.sampling`` rules, held for a person under ``approve``, never answered
from the ledger.

Real processes: the proxy (``python -m agent_gate mcp proxy``) in front of the real
``mcp_features.py`` server, an SDK client over stdio, ``agent-gate approve``/``deny``
run as an operator runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp.types as mt
import pytest
from mcp.client.session import ClientRequestContext
from mcp_gateway_harness import POLICY, ROOT, Gateway, http_client, text
from waiting import wait_until

from agent_gate.ledger import Ledger
from agent_gate.ledger.records import CallRecord
from agent_gate.policy.mcp_rules import SAMPLING_TOOL

pytestmark = [
    pytest.mark.slow,
    # The upstream is told to sample on its own by a roots change, which the SDK calls
    # deprecated (SEP-2577); nothing else here tells it.
    pytest.mark.filterwarnings("ignore:The roots capability is deprecated"),
]

TASK = "sampling"


def _policy(tmp: Path, sampling: str) -> Path:
    """The gateway tests' policy with its ``mcp.sampling`` rules replaced."""
    base = POLICY.read_text("utf-8").split("\nmcp:\n")[0]
    path = tmp / "policy.yaml"
    path.write_text(f"{base}\nmcp:\n  sampling:\n{sampling}", "utf-8")
    return path


class Client:
    """The client's side: what it was asked, and its answers."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def sampling(self, ctx: ClientRequestContext,
                       params: mt.CreateMessageRequestParams) -> Any:
        said = params.messages[0].content
        prompt = said.text if isinstance(said, mt.TextContent) else "?"
        self.asked.append(prompt)
        return mt.CreateMessageResult(role="assistant", model="client-model",
                                      content=mt.TextContent(type="text", text=f"{prompt}!"))

    async def roots(self, ctx: ClientRequestContext) -> Any:
        return mt.ListRootsResult(roots=[])

    def callbacks(self) -> dict[str, Any]:
        return {"sampling_callback": self.sampling, "list_roots_callback": self.roots}


def _sampling_rows(gw: Gateway) -> list[CallRecord]:
    with Ledger(gw.db) as ledger:
        return [r for r in ledger.calls(TASK) if r.tool == SAMPLING_TOOL]


async def _one_waiting(gw: Gateway) -> CallRecord:
    def waiting() -> list[CallRecord]:
        return [r for r in _sampling_rows(gw) if r.state.value == "awaiting_approval"]

    await anyio.to_thread.run_sync(lambda: wait_until(
        waiting, what="a sampling request waiting for approval"))
    (row,) = waiting()
    return row


async def _operator(gw: Gateway, *args: str) -> subprocess.CompletedProcess[str]:
    return await anyio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "agent_gate", *args, "--task", TASK, "--by", "ana",
         "--db", gw.db], env=gw.env, cwd=str(ROOT), capture_output=True, text=True,
        timeout=120, check=False))


def test_a_sampling_request_waits_for_a_person_and_is_put_to_the_client_once_approved(
    tmp_path: Path,
) -> None:
    gw = Gateway(tmp_path, policy=_policy(tmp_path, (
        "    - {id: ask-first, effect: approve, tool: sample}\n")))
    client = Client()
    progress: list[str | None] = []

    async def progressed(done: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    async def main() -> None:
        async with gw.stdio("--task", TASK, "--approval-wait", "never",
                            **client.callbacks()) as session:
            results: list[mt.CallToolResult] = []

            async def sample() -> None:
                results.append(await session.call_tool(
                    "sample", {"prompt": "hi"}, meta={"agent-gate/call-id": "s1"},
                    progress_callback=progressed))

            async with anyio.create_task_group() as tg:
                tg.start_soon(sample)
                row = await _one_waiting(gw)
                # Recorded before it reached the client, with what a person is shown.
                assert client.asked == []
                shown = row.arguments
                assert shown is not None and shown["tool"] == "sample"
                assert shown["call"] == "s1"
                assert shown["request"]["messages"][0]["content"]["text"] == "hi"
                assert row.rule_ids == ("ask-first",)
                # The client's request is kept alive meanwhile, naming what it waits for.
                await anyio.to_thread.run_sync(lambda: wait_until(
                    lambda: any(row.call_id in (m or "") for m in progress),
                    what="progress naming the sampling request"))
                # An answer to other arguments than those shown is refused.
                stale = await _operator(gw, "approve", row.call_id, "--expect-hash", "0" * 64)
                assert stale.returncode != 0 and client.asked == []
                approved = await _operator(gw, "approve", row.call_id)
                assert approved.returncode == 0, approved.stderr
            (result,) = results
            assert not result.is_error and text(result) == "sampled: hi!"
            assert client.asked == ["hi"]

    anyio.run(main)
    (row,) = _sampling_rows(gw)
    assert row.state.value == "succeeded" and gw.state(TASK, "s1") == "succeeded"
    with Ledger(gw.db) as ledger:
        events = [e.event for e in ledger.audit(TASK, call_id=row.call_id)]
        assert "answer_refused" in events and "approval_granted" in events
        (note,) = [e for e in ledger.audit(TASK, call_id="s1") if e.event == "mcp_sampling"]
    assert note.detail["sampling_call"] == row.call_id
    assert note.detail["decision"] == "approve" and note.detail["state"] == "succeeded"


def test_a_denied_sampling_request_is_an_mcp_error_to_the_upstream_and_never_asked(
    tmp_path: Path,
) -> None:
    gw = Gateway(tmp_path, policy=_policy(tmp_path, (
        "    - {id: ask-first, effect: approve, tool: sample}\n")))
    client = Client()

    async def main() -> None:
        async with gw.stdio("--task", TASK, "--approval-wait", "never",
                            **client.callbacks()) as session:
            results: list[mt.CallToolResult] = []

            async def sample() -> None:
                results.append(await session.call_tool(
                    "sample", {"prompt": "no"}, meta={"agent-gate/call-id": "s2"}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(sample)
                row = await _one_waiting(gw)
                denied = await _operator(gw, "deny", row.call_id, "--reason", "too costly")
                assert denied.returncode == 0, denied.stderr
            (result,) = results
            assert result.is_error and client.asked == []

    anyio.run(main)
    (row,) = _sampling_rows(gw)
    assert row.state.value == "rejected"
    # The tool's result was made without the input it asked for: in doubt, not succeeded.
    assert gw.state(TASK, "s2") == "in_doubt"


def test_a_sampling_request_nobody_answers_is_withdrawn_and_asked_anew_next_time(
    tmp_path: Path,
) -> None:
    gw = Gateway(tmp_path, policy=_policy(tmp_path, (
        "    - {id: ask-first, effect: approve, tool: sample}\n")))
    client = Client()

    async def main() -> None:
        async with gw.stdio("--task", TASK, "--approval-wait", "0.3s",
                            **client.callbacks()) as session:
            for call_id in ("w1", "w2"):
                result = await session.call_tool("sample", {"prompt": "late"},
                                                 meta={"agent-gate/call-id": call_id})
                assert result.is_error and client.asked == []

    anyio.run(main)
    rows = _sampling_rows(gw)
    # Each request is a row of its own: the second was never answered from the first.
    assert len(rows) == 2 and len({r.call_id for r in rows}) == 2
    assert {r.state.value for r in rows} == {"rejected"}
    assert all("withdrawn" in (r.reason or "") for r in rows)


def test_a_sampling_request_outside_any_tool_call_is_recorded_judged_and_never_replayed(
    tmp_path: Path,
) -> None:
    gw = Gateway(tmp_path, policy=_policy(tmp_path, (
        "    - {id: unasked-ok, effect: allow, tool: ''}\n")))
    client = Client()

    async def main() -> None:
        async with gw.stdio("--task", TASK, **client.callbacks()) as session:
            assert not (await session.call_tool("whoami", {})).is_error
            for n in (1, 2):  # the upstream samples of its own accord when told
                await session.send_roots_list_changed()
                await anyio.to_thread.run_sync(lambda n=n: wait_until(
                    lambda: gw.lines().count("sampled-unasked:unasked!") == n,
                    what="the upstream to get the client's answer"))

    anyio.run(main)
    assert client.asked == ["unasked", "unasked"]  # asked each time, never replayed
    rows = _sampling_rows(gw)
    assert len(rows) == 2 and {r.state.value for r in rows} == {"succeeded"}
    for row in rows:
        assert row.arguments == {"tool": "", "call": None, "request": row.arguments["request"]}
        assert row.rule_ids == ("unasked-ok",)


def test_a_sampling_request_outside_any_tool_call_is_denied_by_default(
    tmp_path: Path,
) -> None:
    gw = Gateway(tmp_path)  # sampling allowed for the `sample` tool only
    client = Client()

    async def main() -> None:
        async with gw.stdio("--task", TASK, **client.callbacks()) as session:
            assert not (await session.call_tool("whoami", {})).is_error
            await session.send_roots_list_changed()
            await anyio.to_thread.run_sync(lambda: wait_until(
                lambda: any(line.startswith("sampled-unasked-error:") for line in gw.lines()),
                what="the upstream to be refused"))

    anyio.run(main)
    (line,) = gw.lines()
    assert "denied by policy rule mcp-default" in line and client.asked == []
    (row,) = _sampling_rows(gw)
    assert row.state.value == "rejected" and row.rule_ids == ("mcp-default",)


def test_over_http_a_sampling_request_outside_any_call_is_recorded_in_its_sessions_task(
    tmp_path: Path,
) -> None:
    """Served over HTTP, each client session has its own task (named from its session
    id) and its own upstream child: a request that child makes on its own is that
    session's, recorded beside the session's calls."""
    gw = Gateway(tmp_path, policy=_policy(tmp_path, (
        "    - {id: unasked-ok, effect: allow, tool: ''}\n")))
    client = Client()

    async def main(url: str) -> None:
        async with http_client(url, **client.callbacks()) as session:
            assert not (await session.call_tool("whoami", {})).is_error
            await session.send_roots_list_changed()
            await anyio.to_thread.run_sync(lambda: wait_until(
                lambda: "sampled-unasked:unasked!" in gw.lines(),
                what="the upstream to get the client's answer"))

    with gw.http() as (url, _):
        anyio.run(main, url)
    assert client.asked == ["unasked"]
    with Ledger(gw.db) as ledger:
        held = {s.task.id: [r.tool for r in ledger.calls(s.task.id)]
                for s in ledger.tasks()}
    (task,) = [t for t, tools in held.items() if SAMPLING_TOOL in tools]
    assert task.startswith("mcp-session-") and "whoami" in held[task]
