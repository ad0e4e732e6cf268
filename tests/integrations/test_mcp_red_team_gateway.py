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
from mcp.shared.exceptions import MCPError
from mcp_gateway_harness import Gateway, alive, http_client, text

from agent_gate.ledger import Ledger

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


POLICY = """\
version: 1
tools:
  sample: {rules: [{id: sample-allowed, effect: allow}]}
  whoami: {rules: [{id: whoami-allowed, effect: allow}]}
mcp:
  resources:
    - {id: no-keys, effect: deny, uri: "secret://*", reason: Keys stay on the server.}
    - {id: logo-hidden, effect: redact, uri: "docs://logo"}
    - {id: readme-only, effect: allow, uri: "docs://readme"}
  prompts:
    - {id: no-greetings, effect: deny, name: "gre*"}
  sampling:
    - {id: summaries-only, effect: allow, tool: summarize}
"""


@pytest.mark.slow
def test_the_policy_keeps_resources_prompts_and_sampling_to_what_it_allows(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    gw = Gateway(tmp_path, policy=policy)
    asked: list[str] = []

    async def sampling(ctx: ClientRequestContext, params: Any) -> Any:
        asked.append("sampling")
        return mt.CreateMessageResult(role="assistant", model="m",
                                      content=mt.TextContent(type="text", text="x"))

    async def main() -> None:
        async with gw.stdio("--task", TASK, sampling_callback=sampling) as client:
            listed = [str(r.uri) for r in (await client.list_resources()).resources]
            assert listed == ["docs://readme", "docs://logo"]  # the keys are not shown
            for uri in ("secret://keys", "docs://pages/1", "file:///etc/passwd", "DOCS://readme"):
                with pytest.raises(MCPError) as raised:
                    await client.read_resource(uri)
                rule = "no-keys" if uri.startswith("secret") else "mcp-default"
                assert raised.value.error.data == {"agent-gate/rule-ids": [rule]}, uri
                assert f"denied by policy rule {rule}" in raised.value.message
            with pytest.raises(MCPError):
                await client.subscribe_resource("secret://keys")
            hidden = (await client.read_resource("docs://logo")).contents[0]
            assert isinstance(hidden, mt.TextResourceContents)
            assert "redacted by policy rule logo-hidden" in hidden.text
            assert "PNG" not in hidden.text
            readme = (await client.read_resource("docs://readme")).contents[0]
            assert isinstance(readme, mt.TextResourceContents) and readme.text.startswith(
                "contents of")

            assert (await client.list_prompts()).prompts == []
            with pytest.raises(MCPError) as raised:
                await client.get_prompt("greet", {"who": "x"})
            assert raised.value.error.data == {"agent-gate/rule-ids": ["no-greetings"]}

            # The policy allows sampling for `summarize` only: `sample` asks in vain,
            # the client is never asked, and the call is in doubt, not succeeded.
            result = await client.call_tool("sample", {"prompt": "p"},
                                            meta={"agent-gate/call-id": "s"})
            assert result.is_error and asked == []
        assert gw.state(TASK, "s") == "in_doubt"
        with Ledger(gw.db) as ledger:  # the request and its decision are on the call's trail
            (entry,) = [e for e in ledger.audit(TASK, call_id="s") if e.event == "mcp_sampling"]
            assert entry.detail["decision"] == "deny"
            assert entry.detail["rule_ids"] == ["mcp-default"]

    anyio.run(main)


def test_client_sessions_beyond_the_bound_are_asked_to_retry_not_given_a_child(
    tmp_path: Path,
) -> None:
    """Each client session over HTTP may start a child: a client opening sessions
    without end would start children without end. Past the bound, a session's request
    is refused (retry), and once a session ends another gets its own."""
    gw = Gateway(tmp_path)

    async def main(url: str) -> None:
        async with http_client(url) as first:
            assert ":" in text(await first.call_tool("whoami", {}))
            async with http_client(url) as second:
                refused = await second.call_tool("whoami", {})
                assert refused.is_error and "upstream unavailable, retry" in text(refused)
                assert "--max-upstream-sessions" in text(refused)
        async with http_client(url) as third:
            with anyio.fail_after(60):
                while (got := await third.call_tool("whoami", {})).is_error:
                    await anyio.sleep(0.05)  # the first session's child is being stopped
            assert ":" in text(got)

    with gw.http("--max-upstream-sessions", "1") as (url, _):
        anyio.run(main, url)
