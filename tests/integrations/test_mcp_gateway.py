"""The proxy forwards every MCP feature its upstream offers, and only those.

Real processes: the proxy (``python -m agent_gate mcp proxy``) in front of the real
``mcp_features.py`` server, an SDK client over stdio."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as mt
import pytest
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_gateway_harness import FEATURES, Gateway, http_client, text

TASK = "gateway"


async def sampled(ctx: ClientRequestContext, params: mt.CreateMessageRequestParams) -> Any:
    said = params.messages[0].content
    asked = said.text if isinstance(said, mt.TextContent) else "?"
    return mt.CreateMessageResult(role="assistant", model="client-model",
                                  content=mt.TextContent(type="text", text=f"{asked}!"))


async def elicited(ctx: ClientRequestContext, params: mt.ElicitRequestParams) -> Any:
    return mt.ElicitResult(action="accept", content={"name": "ana"})


async def rooted(ctx: ClientRequestContext) -> Any:
    return mt.ListRootsResult(roots=[mt.Root(uri="file:///work/a", name="a")])


@pytest.mark.slow
def test_every_feature_of_the_upstream_is_forwarded_and_advertised(tmp_path: Path) -> None:
    gw = Gateway(tmp_path)
    logs: list[mt.LoggingMessageNotificationParams] = []
    notes: list[Any] = []

    async def logged(params: mt.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async def noticed(message: Any) -> None:
        notes.append(message)

    async def main() -> None:
        async with gw.stdio("--task", TASK, sampling_callback=sampled,
                            elicitation_callback=elicited, list_roots_callback=rooted,
                            logging_callback=logged, message_handler=noticed) as client:
            caps = client.server_capabilities
            assert caps is not None and caps.resources is not None
            assert caps.resources.subscribe and caps.prompts is not None
            assert caps.logging is not None and caps.completions is not None

            listed = await client.list_resources()
            assert [r.name for r in listed.resources] == ["readme", "logo"]  # not the keys
            read = await client.read_resource("docs://readme")
            assert isinstance(read.contents[0], mt.TextResourceContents)
            assert read.contents[0].text == "contents of docs://readme"
            blob = await client.read_resource("docs://logo")
            assert isinstance(blob.contents[0], mt.BlobResourceContents)
            assert base64.b64decode(blob.contents[0].blob) == b"\x89PNG\r\n"
            templates = await client.list_resource_templates()
            assert templates.resource_templates[0].uri_template == "docs://pages/{page}"
            with pytest.raises(MCPError) as raised:  # the upstream's own error, passed on
                await client.read_resource("docs://nothing")
            assert "no resource docs://nothing" in raised.value.message

            prompts = await client.list_prompts()
            assert [p.name for p in prompts.prompts] == ["greet"]
            got = await client.get_prompt("greet", {"who": "ana"})
            assert isinstance(got.messages[0].content, mt.TextContent)
            assert got.messages[0].content.text == "hello ana"
            done = await client.complete(mt.PromptReference(type="ref/prompt", name="greet"),
                                         {"name": "who", "value": "an"})
            assert done.completion.values == ["ana", "andrei"]

            await client.set_logging_level("debug")
            assert text(await client.call_tool("log", {"text": "from upstream"})) == "logged"
            assert [(m.level, m.data) for m in logs] == [("warning", "from upstream")]

            seen: list[tuple[float, float | None, str | None]] = []

            async def progressed(done: float, total: float | None, message: str | None) -> None:
                seen.append((done, total, message))

            result = await client.call_tool("progress", {}, progress_callback=progressed)
            assert not result.is_error, text(result)
            assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]

            assert text(await client.call_tool("sample", {"prompt": "hi"})) == "sampled: hi!"
            assert text(await client.call_tool("elicit", {})) == (
                "elicited: accept {'name': 'ana'}")
            assert text(await client.call_tool("roots", {})) == "roots: file:///work/a"

            await client.subscribe_resource("docs://readme")
            await client.call_tool("touch", {"uri": "docs://readme"})
            with anyio.fail_after(30):
                while not any(isinstance(n, mt.ResourceUpdatedNotification) for n in notes):
                    await anyio.sleep(0.01)
            await client.unsubscribe_resource("docs://readme")
            await client.call_tool("touch", {"uri": "docs://readme"}, meta={
                "agent-gate/call-id": "touch-again"})
            assert sum(isinstance(n, mt.ResourceUpdatedNotification) for n in notes) == 1
            assert await client.send_ping() is not None

        assert gw.state(TASK, next(iter(_calls(gw, "sample")))) == "succeeded"

    anyio.run(main)


def _calls(gw: Gateway, tool: str) -> list[str]:
    from agent_gate.ledger import Ledger

    with Ledger(gw.db) as ledger:
        return [r.call_id for r in ledger.calls(TASK) if r.tool == tool]


def test_what_the_upstream_does_not_offer_the_proxy_does_not_advertise(tmp_path: Path) -> None:
    gw = Gateway(tmp_path, upstream_flags=("--bare",))

    async def main() -> None:
        async with gw.stdio() as client:
            caps = client.server_capabilities
            assert caps is not None and caps.tools is not None and caps.tools.list_changed
            assert caps.resources is None and caps.prompts is None
            assert caps.logging is None and caps.completions is None
            for ask in (client.list_resources(), client.list_prompts(),
                        client.set_logging_level("debug")):
                with pytest.raises(MCPError) as raised:
                    await ask
                assert raised.value.code == mt.METHOD_NOT_FOUND

    anyio.run(main)


def test_a_sampled_result_the_client_could_not_sample_for_is_in_doubt_not_succeeded(
    tmp_path: Path,
) -> None:
    """A client with no sampling: the upstream gets "not supported" and answers
    anyway; that answer is never recorded as the call's success (nor replayed)."""
    gw = Gateway(tmp_path)

    async def main() -> None:
        async with gw.stdio("--task", TASK) as client:
            result = await client.call_tool("sample", {"prompt": "hi"},
                                            meta={"agent-gate/call-id": "s1"})
            assert result.is_error and "may or may not have run" in text(result), text(result)
            again = await client.call_tool("sample", {"prompt": "hi"},
                                           meta={"agent-gate/call-id": "s1"})
            assert again.is_error and "sampled" not in text(again)
        assert gw.state(TASK, "s1") == "in_doubt"

    anyio.run(main)


@pytest.mark.slow
def test_a_cancelled_call_that_had_started_is_in_doubt(tmp_path: Path) -> None:
    gw = Gateway(tmp_path)

    async def main() -> None:
        async with gw.stdio("--task", TASK) as client:
            with anyio.move_on_after(60) as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: client.call_tool(
                        "slow", {"marker": "x"}, meta={"agent-gate/call-id": "c1"}))
                    while "slow:x" not in gw.lines():
                        await anyio.sleep(0.01)
                    tg.cancel_scope.cancel()  # the SDK sends notifications/cancelled
            assert not scope.cancelled_caught
            with anyio.fail_after(30):
                while gw.state(TASK, "c1") == "executing":
                    await anyio.sleep(0.02)
            assert gw.state(TASK, "c1") == "in_doubt"
            await client.send_ping()  # the proxy still serves

    anyio.run(main)


@pytest.mark.slow
def test_a_malformed_upstream_tool_is_left_out_with_a_warning_never_fatal(
    tmp_path: Path,
) -> None:
    """Was: the SDK validates a tools/list page whole, so one entry with no inputSchema
    stopped the proxy at start. Now that tool is left out, said on stderr, and listed
    by ``agent-gate mcp check``."""
    gw = Gateway(tmp_path, upstream_flags=("--bad-tool",))

    async def main(url: str) -> None:
        async with http_client(url) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert "whoami" in names and "broken" not in names
            assert text(await client.call_tool("note", {"text": "x"})) == "noted"

    with gw.http() as (url, _):
        anyio.run(main, url)
    said = gw.stderr.read_text()
    assert "tool 'broken' not offered: not a valid tool (inputSchema: missing)" in said, said

    checked = subprocess.run(
        [sys.executable, "-m", "agent_gate", "mcp", "check", "--policy", str(gw.policy), "--",
         sys.executable, str(FEATURES), "--bad-tool"],
        env=gw.env, capture_output=True, text=True, timeout=120, check=False)
    assert checked.returncode == 1, checked.stderr
    assert "left out: 'broken': not a valid tool (inputSchema: missing)" in checked.stdout
    assert "offered: whoami, progress, log" in checked.stdout
    assert checked.stdout.startswith(
        "upstream: features (tools, resources (subscribe), prompts, logging, completions)")


def test_a_cancelled_async_call_is_in_doubt_even_while_the_thread_pool_is_busy(
    tmp_path: Path,
) -> None:
    """The gate records a cancelled run in doubt from a worker thread. Cancelled as
    anyio cancels (again at each await: how the SDK cancels a request's handler), the
    job that records it was itself cancelled if no worker had taken it yet, and the
    call stayed ``executing`` for good (seen through the proxy about one run in five)."""
    import asyncio
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from agent_gate.gate import Gate
    from agent_gate.tools import ToolRegistry

    tools = ToolRegistry()
    running = threading.Event()

    @tools.tool(schema={"type": "object"}, effect="write")
    async def slow(**kw: Any) -> str:
        running.set()
        await asyncio.sleep(60)
        return "done"

    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    release = threading.Event()

    async def main() -> None:
        pool = ThreadPoolExecutor(max_workers=1)
        asyncio.get_running_loop().set_default_executor(pool)
        with Gate(tools, db, create=True) as gate:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(gate.aexecute, "t", {"call_id": "c", "name": "slow",
                                                       "arguments": {}})
                    while not running.is_set():
                        await anyio.sleep(0.005)
                    pool.submit(release.wait)  # the one worker is busy when the run is cut
                    scope.cancel()
            release.set()
            with anyio.fail_after(30):
                while gate.ledger.get("t", "c").state.value == "executing":
                    await anyio.sleep(0.01)
            assert gate.ledger.get("t", "c").state.value == "in_doubt"

    anyio.run(main)


@pytest.mark.slow
def test_a_stream_the_upstream_closes_mid_call_is_resumed_at_once(tmp_path: Path) -> None:
    """The upstream closes the call's stream and says to resume in ten minutes
    (``retry``, SEP-1699); the proxy, whose client waits on that call, resumes at once
    (was: the SDK's client waited the ten minutes out, and the client timed out)."""

    async def main(gw: Gateway) -> None:
        async with gw.stdio() as client:
            with anyio.fail_after(120):  # far under the ten minutes the upstream asks
                result = await client.call_tool("reconnect", {})
            assert text(result) == "reconnected", text(result)

    with Gateway(tmp_path).http_upstream() as gw:
        anyio.run(main, gw)


def test_the_mcp_policy_section_is_optional_checked_and_leaves_old_hashes_alone() -> None:
    from agent_gate.errors import PolicyLoadError
    from agent_gate.policy import Policy

    old = "version: 1\ntools:\n  t: {rules: [{id: r, effect: allow}]}\n"
    policy = Policy.from_text(old)
    assert policy.document.mcp is None
    assert "mcp" not in policy.document.model_dump(mode="json", by_alias=True)
    empty = Policy.from_text(old + "mcp: {}\n")
    assert empty.document.mcp is not None and empty.hash != policy.hash
    for bad, where in (
        ("mcp:\n  resources:\n    - {id: a, effect: maybe, uri: 'x://*'}\n", "effect"),
        ("mcp:\n  sampling:\n    - {id: a, effect: ask}\n", "effect"),
        ("mcp:\n  prompts:\n    - {id: a, effect: allow}\n", "name"),
        ("mcp:\n  resources:\n    - {id: a, effect: allow, uri: 'x'}\n"
         "  prompts:\n    - {id: a, effect: allow, name: 'x'}\n", "duplicate rule id"),
    ):
        with pytest.raises(PolicyLoadError) as raised:
            Policy.from_text(old + bad)
        assert where in str(raised.value), str(raised.value)
    # A person answers a sampling request first: held by the gate, as a call is.
    held = Policy.from_text(old + "mcp:\n  sampling:\n    - {id: a, effect: approve}\n")
    decision = held.evaluate("mcp:sampling/createMessage", {"tool": "t", "call": None,
                                                            "request": {}})
    assert decision.effect.value == "approve" and decision.rule_ids == ("a",)


def test_only_whole_retry_lines_are_rewritten_wherever_the_chunks_split() -> None:
    """The proxy's upstream SSE bodies: ``retry`` fields say 10 ms, every other byte
    (a data line that mentions retry, CR, CRLF and LF line ends) goes through as it came,
    however the body is cut into reads."""
    from agent_gate.integrations.mcp import wire

    body = (b"id: 1\r\nretry: 5000\r\ndata: retry: 7\n\nretry:600000\rdata: {}\n\n"
            b"retry: soon\n\n")
    want = (b"id: 1\r\nretry: 10\r\ndata: retry: 7\n\nretry: 10\rdata: {}\n\n"
            b"retry: soon\n\n")

    class Chunks:
        def __init__(self, parts: list[bytes]) -> None:
            self.parts = parts

        async def __aiter__(self) -> Any:
            for part in self.parts:
                yield part

    async def read(parts: list[bytes]) -> bytes:
        return b"".join([c async for c in wire._SoonRetry(Chunks(parts))])

    for cut in range(len(body) + 1):
        parts = [body[:cut], body[cut:]]
        assert anyio.run(read, parts) == want, cut
    assert anyio.run(read, [bytes([b]) for b in body]) == want


@pytest.mark.slow
def test_a_request_an_http_upstream_sends_aside_at_once_reaches_the_client(
    tmp_path: Path,
) -> None:
    """An HTTP upstream sends what relates to no request (here an elicitation) on its
    session's standalone GET stream, and only stores what it sends before that stream
    is open. A client session's first call is its upstream session's first request:
    sent before the stream opened (made late here, as under load), the upstream's
    question was never delivered and the call waited for ever."""

    async def main(gw: Gateway) -> None:
        with gw.http("--task", TASK) as (url, _):
            async with http_client(url, elicitation_callback=elicited) as client:
                with anyio.fail_after(60):  # lost, it would wait for ever
                    result = await client.call_tool("elicit_aside", {})
                assert text(result) == "elicited: accept {'name': 'ana'}", text(result)

    with Gateway(tmp_path, upstream_flags=("--late-get",)).http_upstream() as gw:
        anyio.run(main, gw)
