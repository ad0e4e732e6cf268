"""Red team: two clients on one proxy never reach each other's upstream session.

One proxy serving Streamable HTTP, two SDK clients, the real ``mcp_features.py``
upstream over stdio (a child per client session) and over Streamable HTTP (an
upstream session per client session). Each client answers the upstream's requests
with its own name, so a request routed to the wrong client shows in the result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp.types as mt
import pytest
from mcp import ClientSession
from mcp.client.session import ClientRequestContext
from mcp_gateway_harness import Gateway, alive, http_client, text

TASK = "shared-task"


class Client:
    """What one client was sent: progress, log lines, notifications, requests."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.asked: list[str] = []
        self.progress: list[tuple[float, str | None]] = []
        self.logs: list[Any] = []
        self.notes: list[Any] = []

    async def sampling(self, ctx: ClientRequestContext,
                       params: mt.CreateMessageRequestParams) -> Any:
        self.asked.append("sampling")
        return mt.CreateMessageResult(role="assistant", model=self.name,
                                      content=mt.TextContent(type="text", text=self.name))

    async def elicitation(self, ctx: ClientRequestContext, params: mt.ElicitRequestParams) -> Any:
        self.asked.append("elicitation")
        return mt.ElicitResult(action="accept", content={"name": self.name})

    async def logging(self, params: mt.LoggingMessageNotificationParams) -> None:
        self.logs.append(params.data)

    async def message(self, message: Any) -> None:
        self.notes.append(message)

    async def progressed(self, done: float, total: float | None, message: str | None) -> None:
        self.progress.append((done, message))

    def callbacks(self) -> dict[str, Any]:
        return {"sampling_callback": self.sampling, "elicitation_callback": self.elicitation,
                "logging_callback": self.logging, "message_handler": self.message}

    def updates(self) -> list[str]:
        return [str(n.params.uri) for n in self.notes
                if isinstance(n, mt.ResourceUpdatedNotification)]


async def _both(url: str, a: Client, b: Client, gw: Gateway, stdio_upstream: bool) -> None:
    async with http_client(url, **a.callbacks()) as ca, http_client(url, **b.callbacks()) as cb:
        who_a = text(await ca.call_tool("whoami", {}))
        who_b = text(await cb.call_tool("whoami", {}))
        assert who_a != who_b, "two client sessions share one upstream session"
        pid_a = int(who_a.split(":")[0])

        # A sampling request caused by A's call is A's to answer, and B's by B.
        results: dict[str, str] = {}

        async def sample(client: ClientSession, key: str) -> None:
            results[key] = text(await client.call_tool("sample", {"prompt": key}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(sample, ca, "a")
            tg.start_soon(sample, cb, "b")
        assert results == {"a": "sampled: A", "b": "sampled: B"}
        assert a.asked == ["sampling"] and b.asked == ["sampling"]

        # Progress: each client's reports come to its own request only.
        async def progress(client: ClientSession, into: Client) -> None:
            result = await client.call_tool("progress", {}, progress_callback=into.progressed,
                                            meta={"agent-gate/call-id": f"p-{into.name}"})
            assert not result.is_error, text(result)

        async with anyio.create_task_group() as tg:
            tg.start_soon(progress, ca, a)
            tg.start_soon(progress, cb, b)
        assert [d for d, _ in a.progress] == [1, 2, 3]
        assert [d for d, _ in b.progress] == [1, 2, 3]

        # Log lines of A's call reach A only.
        await ca.call_tool("log", {"text": "secret of A"})
        assert a.logs == ["secret of A"] and b.logs == []

        # A's subscription is A's: B's touch of the same resource tells nobody.
        await ca.subscribe_resource("docs://readme")
        await cb.call_tool("touch", {"uri": "docs://readme"})
        await ca.call_tool("touch", {"uri": "docs://readme"})
        with anyio.fail_after(30):
            while not a.updates():
                await anyio.sleep(0.01)
        assert a.updates() == ["docs://readme"] and b.updates() == []

        # One task, two sessions: a write repeated under one call id runs once.
        meta = {"agent-gate/call-id": "n1"}
        first = await ca.call_tool("note", {"text": "once"}, meta=meta)
        second = await cb.call_tool("note", {"text": "once"}, meta=meta)
        assert text(first) == text(second) == "noted"
        assert gw.lines().count("note:once") == 1

    if stdio_upstream:  # A's session ended (DELETE): its child is stopped
        with anyio.fail_after(30):
            while alive(pid_a):
                await anyio.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize("upstream", ["stdio", "http"])
def test_two_clients_on_one_proxy_never_see_each_others_upstream(
    tmp_path: Path, upstream: str,
) -> None:
    base = Gateway(tmp_path)
    a, b = Client("A"), Client("B")

    def run(gw: Gateway) -> None:
        with gw.http("--task", TASK) as (url, _):
            anyio.run(_both, url, a, b, gw, upstream == "stdio")

    if upstream == "stdio":
        run(base)
    else:
        with base.http_upstream() as gw:
            run(gw)
