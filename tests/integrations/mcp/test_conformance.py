"""The official MCP conformance suite, run against its own reference server directly
and through ``agent-gate mcp proxy`` (upstream over Streamable HTTP, and upstream as
the proxy's stdio child) under a policy that allows every tool.

What it proves: every scenario the reference server passes directly passes through
the proxy, except those ``conformance/expected-failures.txt`` lists with what the
proxy does not forward; a listed scenario that passes again fails the test until its
line is deleted. The counts are printed in the run's ``measured`` section. How to
run it, and where the pieces come from: ``conformance/README.md``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
import yaml
from conformance_results import (
    Scenario,
    Transport,
    judge,
    read_expected,
    read_results,
    worse,
)
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.client.streamable_http import streamable_http_client
from mcp_harness import Setup, _accepts, free_port
from waiting import wait_until

pytestmark = pytest.mark.slow

SUITE = Path(__file__).resolve().parent / "conformance"
BIN = SUITE / "node_modules" / ".bin"
EXPECTED = SUITE / "expected-failures.txt"
ALLOW_ALL = SUITE / "allow-all.yaml"
NODE_AT_LEAST = (20, 18, 1)
"""The suite's HTTP client (undici 7) needs it; Debian 12's own nodejs is 18."""


def _not_runnable() -> str | None:
    """Why the suite cannot run here (a skip reason), or None."""
    node = shutil.which("node")
    if node is None:
        return "no node on PATH (.ci/run installs Node.js; see conformance/README.md)"
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False)
    found = tuple(int(n) for n in re.findall(r"\d+", version.stdout)[:3])
    if found < NODE_AT_LEAST:
        wanted = ".".join(map(str, NODE_AT_LEAST))
        return f"node {version.stdout.strip()} is older than {wanted}, which the suite needs"
    if not (BIN / "conformance").exists():
        return f"the suite is not installed: npm ci --prefix {SUITE}"
    return None


def typescript(script: Path) -> list[str]:
    """``node`` running a TypeScript file in one process, with the loader that
    ``node --import tsx`` loads (tsx's package entry). The ``tsx`` command would run it
    in a child process of its own, which a SIGKILL of ``tsx`` leaves running."""
    tsx = SUITE / "node_modules" / "tsx"
    entry = json.loads((tsx / "package.json").read_text("utf-8"))["exports"]["."]
    return [shutil.which("node") or "node", "--import", (tsx / entry).resolve().as_uri(),
            str(script)]


def suite_version() -> str:
    """The installed suite's version (package.json pins it), as the counts quote it."""
    package = SUITE / "node_modules" / "@modelcontextprotocol" / "conformance" / "package.json"
    return str(json.loads(package.read_text("utf-8"))["version"])


@pytest.fixture(scope="module")
def installed() -> None:
    """Skips, saying why, where the suite cannot run."""
    reason = _not_runnable()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def scenarios(installed: None) -> list[str]:
    """Every server scenario of the installed suite (``--suite all`` runs these)."""
    listed = subprocess.run([BIN / "conformance", "list", "--server"], capture_output=True,
                            text=True, timeout=120, check=True)
    names = re.findall(r"^\s+- (\S+)$", listed.stdout, flags=re.MULTILINE)
    assert names, f"conformance list --server listed no scenario:\n{listed.stdout}"
    return names


@contextmanager
def reference_server(log: Path) -> Iterator[str]:
    """The suite's reference server (``everything-server.ts``) on a free port; its URL.
    Its own log (a line per session) goes to ``log``."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(typescript(SUITE / "everything-server.ts"), cwd=SUITE,
                                env={**os.environ, "PORT": str(port)}, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _accepts(port, proc, "the reference server"),
                   what=f"the reference server to listen on {port}")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(timeout=60)
    # Nothing of it is left behind (a process the server started would still hold the port).
    wait_until(lambda: not _listening(port), timeout=10, what=f"port {port} to be released")


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def run_suite(url: str, out: Path, names: list[str]) -> dict[str, Scenario]:
    """Every scenario against ``url``, read from the results the suite writes under
    ``out`` (its printed output goes to ``out``.log)."""
    with out.with_suffix(".log").open("wb") as log:
        subprocess.run([BIN / "conformance", "server", "--url", url, "--suite", "all",
                        "--output-dir", out], stdout=log, stderr=subprocess.STDOUT,
                       timeout=600, check=False)  # its status says "some failed": read them
    return read_results(out, names)


def second_chance(
    url: str, tmp_path: Path, direct: dict[str, Scenario], proxied: dict[str, Scenario]
) -> tuple[dict[str, Scenario], list[str]]:
    """Each scenario worse through the proxy, run once more on its own: the suite's
    request timeouts can turn a busy machine into a failure. (The one seen, the
    elicitation scenarios through a stdio upstream, had a cause, since fixed: see
    ``test_a_request_the_server_sends_at_once_reaches_the_client_through_a_stdio_upstream``.)
    One worse twice counts; one that passes the second time is named in the measured
    line, never hidden."""
    kept = dict(proxied)
    flaky = []
    for name in sorted(proxied):
        if name not in direct or not worse(direct[name], proxied[name]):
            continue
        out = tmp_path / f"again-{name}"
        with out.with_suffix(".log").open("wb") as log:
            subprocess.run([BIN / "conformance", "server", "--url", url, "--scenario", name,
                            "--output-dir", out], stdout=log, stderr=subprocess.STDOUT,
                           timeout=300, check=False)
        retried = read_results(out, [name])[name]
        if not worse(direct[name], retried):
            kept[name] = retried
            flaky.append(name)
    return kept, flaky


def failing(results: dict[str, Scenario]) -> list[str]:
    """A line per scenario the suite calls failed, with its failed checks' messages."""
    lines = []
    for name, result in results.items():
        if not result.passed:
            why = result.unfinished or "; ".join(
                f"{c.id}: {c.error}" for c in result.checks if c.status == "FAILURE")
            lines.append(f"{name}: {why}")
    return lines


async def _tool_names(url: str) -> set[str]:
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        return {tool.name for tool in (await client.list_tools()).tools}


def test_the_reference_server_passes_every_scenario_directly(
    scenarios: list[str], tmp_path: Path, record_property: pytest.RecordProperty,
) -> None:
    with reference_server(tmp_path / "server.log") as url:
        direct = run_suite(url, tmp_path / "direct", scenarios)
        offered = anyio.run(_tool_names, url)
    passed = sum(result.passed for result in direct.values())
    record_property("measured", f"MCP conformance {suite_version()}, directly against its "
                    f"reference server: {passed}/{len(direct)} scenarios pass")
    assert failing(direct) == [], f"suite output: {tmp_path / 'direct.log'}"
    # The proxy is measured under allow-all.yaml: a tool it does not name would be denied,
    # and a scenario would fail for the policy, not for what the proxy forwards.
    allowed = set(yaml.safe_load(ALLOW_ALL.read_text("utf-8"))["tools"])
    assert offered - allowed == set(), f"add these tools to {ALLOW_ALL.name}"


@pytest.mark.parametrize("transport", list(Transport), ids=lambda t: t.value)
def test_no_scenario_is_worse_through_the_proxy_than_directly_unless_expected(
    transport: Transport, scenarios: list[str], tmp_path: Path,
    record_property: pytest.RecordProperty,
) -> None:
    expected = read_expected(EXPECTED, scenarios)
    relay = typescript(SUITE / "stdio-relay.ts")
    with reference_server(tmp_path / "server.log") as url:
        direct = run_suite(url, tmp_path / "direct", scenarios)
        assert failing(direct) == [], "the reference server fails directly: the comparison " \
            "means nothing (see test_the_reference_server_passes_every_scenario_directly)"
        setup = Setup(tmp_path, policy=ALLOW_ALL)
        proxy_in_front = (setup.http_proxy(upstream_url=url) if transport is Transport.HTTP
                          else setup.http_proxy(upstream=relay))
        with proxy_in_front as proxy:
            proxied = run_suite(proxy, tmp_path / "proxied", scenarios)
            proxied, flaky = second_chance(proxy, tmp_path, direct, proxied)
    verdict = judge(transport, direct, proxied, expected)
    again = f"; worse once, then as directly when run again alone: {flaky}" if flaky else ""
    record_property("measured", f"MCP conformance {suite_version()}, {verdict.summary()}{again}")
    if verdict.problems():
        pytest.fail(f"{verdict.problems()}\nsuite output: {tmp_path / 'proxied.log'}",
                    pytrace=False)


# The suite's server uses logging, which the Python SDK now calls deprecated (SEP-2577).
@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")
def test_the_stdio_relay_carries_what_the_proxy_is_expected_to_drop(installed: None) -> None:
    """The stdio column is the proxy's only if the relay in front of the server loses
    nothing: a client on the relay's stdio gets the logs, progress, sampling and
    elicitation requests, resources and prompts the expected failures say the proxy
    does not forward."""
    logs: list[str] = []
    progress: list[float] = []
    prompts: list[str] = []

    async def log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(str(params.data))

    async def sample(
        _: object, params: types.CreateMessageRequestParams,
    ) -> types.CreateMessageResult:
        prompts.extend(m.content.text for m in params.messages
                       if isinstance(m.content, types.TextContent))
        return types.CreateMessageResult(role="assistant", model="relay-test",
                                         content=types.TextContent(type="text", text="relayed"))

    async def elicit(_: object, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"response": "yes"})

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    def text(result: types.CallToolResult) -> str:
        return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))

    async def session() -> None:
        relay = typescript(SUITE / "stdio-relay.ts")
        params = StdioServerParameters(command=relay[0], args=relay[1:])
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, logging_callback=log, sampling_callback=sample,
                          elicitation_callback=elicit) as client,
        ):
            await client.initialize()
            await client.set_logging_level("debug")
            await client.call_tool("test_tool_with_logging", {})
            await client.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
            # (The server then refuses the answer by a schema of its own, directly too; the
            # scenario only asks that the request reaches the client.)
            await client.call_tool("test_sampling", {"prompt": "hi"})
            elicited = await client.call_tool("test_elicitation", {"message": "ok?"})
            resources = await client.list_resources()
            listed = await client.list_prompts()
        assert logs and progress and prompts == ["hi"]
        assert text(elicited) == 'User response: action=accept, content={"response":"yes"}'
        assert "test://static-text" in {str(r.uri) for r in resources.resources}
        assert "test_simple_prompt" in {p.name for p in listed.prompts}

    anyio.run(session)


def test_a_request_the_server_sends_at_once_reaches_the_client_through_a_stdio_upstream(
    installed: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The elicitation scenarios once timed out (MCP error -32001) through the proxy with
    the relay as its stdio child: the reference server sends its elicitation request on
    the session's standalone GET stream, and one sent before that stream is open is
    stored, never delivered. The relay's GET is made late on purpose here (as a fresh
    relay on a loaded machine made it): the call must still get its answer."""
    monkeypatch.setenv("STDIO_RELAY_GET_DELAY_MS", "1500")  # the relay is the proxy's child
    relay = typescript(SUITE / "stdio-relay.ts")

    async def elicit(_: object, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"response": "yes"})

    async def call(url: str) -> str:
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write, elicitation_callback=elicit) as client,
        ):
            await client.initialize()
            with anyio.fail_after(30):  # lost, it would wait for ever
                result = await client.call_tool("test_elicitation", {"message": "ok?"})
        return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))

    with Setup(tmp_path, policy=ALLOW_ALL).http_proxy(upstream=relay) as proxy:
        said = anyio.run(call, proxy)
    assert said == 'User response: action=accept, content={"response":"yes"}'
