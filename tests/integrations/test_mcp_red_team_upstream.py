"""Red team of the proxy's upstream side: the real upstream server SIGKILLed at each step of a
call, over stdio and over Streamable HTTP, and what the ledger, ``agent-gate resolve`` and the
upstream's own side-effect log say afterwards.

The steps: before the request is sent (the upstream just died), after it received the request
but before the tool wrote, after the tool wrote but before it answered, after it answered. A
line in the side-effect log is a real write, whatever the ledger says: no line may appear
twice. The upstream stalls at a step when the test writes the step to ``LOG.stall``
(``mcp_upstream._stall``), so each kill lands exactly there.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as mt
import pytest
from mcp import ClientSession
from mcp_harness import ROOT, UPSTREAM, Setup, _accepts, dead
from waiting import wait_until

pytestmark = pytest.mark.slow  # each test starts the proxy and the upstream (interpreters)

TASK = "red"
CALL_ID = "agent-gate/call-id"
UNAVAILABLE = "agent-gate/upstream-unavailable"
BACKOFF = ("--upstream-backoff", "0.1s,0.5s")
LIMIT = 300.0
"""Seconds a whole test may take: a proxy that hangs fails it instead of the run."""


def text(result: Any) -> str:
    return " ".join(c.text for c in result.content if c.type == "text")


def meta(result: Any) -> dict[str, Any]:
    return dict(result.meta or {})


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: dead(pid), what=f"process {pid} to die")


class Upstream:
    """The upstream as the test reaches it: its pid, killed and (HTTP) started again."""

    def __init__(self, setup: Setup, port: int | None = None) -> None:
        self.setup, self.port = setup, port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str | None:
        return f"http://127.0.0.1:{self.port}/mcp" if self.port is not None else None

    def pid(self) -> int:
        path = self.setup.log.with_name(self.setup.log.name + ".pid")
        return wait_until(lambda: path.exists() and int(path.read_text() or 0),
                          what="the upstream's pid")

    def start(self) -> None:
        """(HTTP) A server on the same port, as an operator restarting it would."""
        assert self.port is not None
        self.proc = subprocess.Popen([sys.executable, str(UPSTREAM), "--http", str(self.port)],
                                     env=self.setup.env, cwd=str(ROOT))
        wait_until(lambda: _accepts(self.port, self.proc), what="the HTTP upstream to listen")

    def kill(self) -> None:
        kill(self.pid())
        if self.proc is not None:
            self.proc.wait(timeout=60)

    def killed_and_back(self) -> None:
        """Kill it; over HTTP, start it again (over stdio the proxy restarts it)."""
        self.kill()
        if self.port is not None:
            self.start()

    def stall(self, stage: str) -> None:
        self.setup.log.with_name(self.setup.log.name + ".stalled").unlink(missing_ok=True)
        self.setup.log.with_name(self.setup.log.name + ".stall").write_text(stage)

    def stalled_pid(self) -> int:
        path = self.setup.log.with_name(self.setup.log.name + ".stalled")
        said = wait_until(lambda: path.exists() and path.read_text(), what="the upstream to stall")
        return int(said.split()[1])


@contextmanager
def upstream_for(setup: Setup, transport: str) -> Iterator[Upstream]:
    if transport == "stdio":
        yield Upstream(setup)
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    up = Upstream(setup, port)
    up.start()
    try:
        yield up
    finally:
        if up.proc is not None and up.proc.poll() is None:
            up.proc.kill()
            up.proc.wait(timeout=60)


async def served(client: ClientSession, name: str, args: dict[str, Any], call_id: str,
                 timeout: float = 120) -> Any:
    """The call's result once the upstream serves again (retried while it is unavailable)."""
    deadline = time.monotonic() + timeout
    while True:
        result = await client.call_tool(name, args, meta={CALL_ID: call_id})
        if not meta(result).get(UNAVAILABLE):
            return result
        assert "upstream unavailable, retry" in text(result)
        assert time.monotonic() < deadline, "the upstream never came back"
        await anyio.sleep(0.1)


async def cut_off(client: ClientSession, up: Upstream, stage: str, note: str) -> Any:
    """``append_note(note)`` with the upstream SIGKILLed at ``stage``; the call's result."""
    up.stall(stage)
    result: list[Any] = []

    async def call() -> None:
        result.append(await client.call_tool("append_note", {"text": note},
                                             meta={CALL_ID: note}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        pid = await anyio.to_thread.run_sync(up.stalled_pid)
        await anyio.to_thread.run_sync(kill, pid)
    if up.port is not None:
        await anyio.to_thread.run_sync(up.start)
    return result[0]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_an_upstream_killed_at_each_step_never_writes_twice_and_the_proxy_serves_again(
    tmp_path: Path, transport: str,
) -> None:
    setup = Setup(tmp_path)

    async def main(up: Upstream) -> None:
        with anyio.fail_after(LIMIT):
            await steps(up)

    async def steps(up: Upstream) -> None:
        async with setup.proxy("--task", TASK, *BACKOFF, upstream_url=up.url) as client:
            # After it received the request, before the tool wrote: in doubt, not failed;
            # resolved not_applied, it runs once.
            c = await cut_off(client, up, "received", "c")
            assert c.is_error and "may or may not have run" in text(c), text(c)
            assert setup.state(TASK, "c") == "in_doubt" and "note:c" not in setup.lines()
            refused = await client.call_tool("append_note", {"text": "c"}, meta={CALL_ID: "c"})
            assert meta(refused).get("agent-gate/state") == "in_doubt" or meta(refused).get(
                UNAVAILABLE)
            resolved = await setup.acli("resolve", "c", "--task", TASK, "--as", "not-applied",
                                        "--by", "ana")
            assert resolved.returncode == 0, resolved.stderr
            assert "not run" not in text(await served(client, "append_note", {"text": "c"}, "c"))

            # After the tool wrote, before it answered: in doubt; resolved succeeded, it is
            # answered from the ledger and never run again.
            d = await cut_off(client, up, "wrote", "d")
            assert d.is_error and "may or may not have run" in text(d), text(d)
            assert setup.state(TASK, "d") == "in_doubt" and setup.lines().count("note:d") == 1
            said = json.dumps({"content": [{"type": "text", "text": "appended (resolved)"}],
                               "structuredContent": {"result": "appended (resolved)"}})
            resolved = await setup.acli("resolve", "d", "--task", TASK, "--as", "succeeded",
                                        "--result", said, "--by", "ana")
            assert resolved.returncode == 0, resolved.stderr
            answer = await served(client, "append_note", {"text": "d"}, "d")
            assert text(answer) == "appended (resolved)" and not answer.is_error

            # After it answered: the answer stands, and is given again from the ledger.
            first = await served(client, "append_note", {"text": "a"}, "a")
            assert text(first) == "appended, 3 lines"
            await anyio.to_thread.run_sync(up.killed_and_back)
            again = await client.call_tool("append_note", {"text": "a"}, meta={CALL_ID: "a"})
            assert text(again) == "appended, 3 lines" and meta(again)["agent-gate/replayed"]

            # Before the request is sent (it just died): not recorded, or runnable; a read
            # is never recorded failed; once it is back, each runs once.
            await served(client, "count_lines", {}, "warm")
            await anyio.to_thread.run_sync(up.kill)
            b = await client.call_tool("append_note", {"text": "b"}, meta={CALL_ID: "b"})
            read = await client.call_tool("count_lines", {}, meta={CALL_ID: "read"})
            for result, call in ((b, "b"), (read, "read")):
                if meta(result).get(UNAVAILABLE):
                    assert setup.state(TASK, call) in (None, "authorized"), text(result)
                else:
                    assert setup.state(TASK, call) == "succeeded", text(result)
            if up.port is not None:
                await anyio.to_thread.run_sync(up.start)
            assert not (await served(client, "append_note", {"text": "b"}, "b")).is_error
            assert not (await served(client, "count_lines", {}, "read")).is_error

        for call in ("a", "b", "c", "d"):
            assert setup.state(TASK, call) == "succeeded"
        assert setup.lines() == ["note:c", "note:d", "note:a", "note:b"]

    with upstream_for(setup, transport) as up:
        anyio.run(main, up)


def test_a_write_refused_while_the_upstream_is_down_runs_after_a_proxy_restart(
    tmp_path: Path,
) -> None:
    """With a fixed --task, a write sent while the upstream was dead is not recorded failed:
    the same write through a restarted proxy runs (it used to be blocked for good)."""
    setup = Setup(tmp_path)
    up = Upstream(setup)

    async def main() -> None:
        with anyio.fail_after(LIMIT):
            await restarted()

    async def restarted() -> None:
        async with setup.proxy("--task", TASK) as client:
            assert (await client.list_tools()).tools  # served: now the upstream dies
            await anyio.to_thread.run_sync(up.kill)
            down = await client.call_tool("append_note", {"text": "z"})
            read = await client.call_tool("count_lines", {})
            for result in (down, read):
                assert meta(result).get("agent-gate/state") != "failed", text(result)
            assert "will not be run again" not in text(down) + text(read)
        async with setup.proxy("--task", TASK) as client:
            after = await client.call_tool("append_note", {"text": "z"})
            assert not after.is_error, text(after)
        assert setup.lines() == ["note:z"]

    anyio.run(main)


def test_after_a_restart_the_tools_are_read_again_under_the_schema_rules(
    tmp_path: Path,
) -> None:
    """The restarted upstream is a new version: its new tool is offered (the client is told),
    the changed schema is not taken."""
    setup = Setup(tmp_path)
    up = Upstream(setup)
    told: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            told.append(message.method)

    async def main() -> None:
        with anyio.fail_after(LIMIT):
            await upgraded()

    async def upgraded() -> None:
        async with setup.proxy("--task", TASK, *BACKOFF, message_handler=on_message) as client:
            before = {t.name: t for t in (await client.list_tools()).tools}
            assert "stamp" not in before
            setup.log.with_name(setup.log.name + ".v2").touch()
            await anyio.to_thread.run_sync(up.kill)
            await anyio.to_thread.run_sync(
                lambda: wait_until(lambda: told, what="tools/list_changed after the restart"))
            after = {t.name: t for t in (await client.list_tools()).tools}
            assert after["count_lines"].input_schema == before["count_lines"].input_schema
            assert "stamp" in after
            stamped = await served(client, "stamp", {"text": "v2"}, "s")
            assert text(stamped) == "stamped, 1 lines"

    anyio.run(main)
    assert setup.lines() == ["stamp:v2"]


def _started(setup: Setup, *args: str) -> subprocess.Popen[str]:
    """The proxy with a client that sent initialize and tools/list (not yet read)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_gate", "mcp", "proxy", "--policy", str(setup.policy),
         "--db", setup.db, "--upstream-timeout", "20s", *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=setup.env, cwd=str(ROOT),
    )
    assert proc.stdin is not None
    for message in (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ):
        proc.stdin.write(json.dumps(message) + "\n")
    proc.stdin.flush()
    return proc


def _answer(proc: subprocess.Popen[str], request_id: int) -> list[dict[str, Any]]:
    """What the proxy wrote up to its answer to ``request_id`` (or its exit)."""
    assert proc.stdout is not None
    answers: list[dict[str, Any]] = []
    for line in proc.stdout:  # ends when the proxy exits
        answers.append(json.loads(line))
        if answers[-1].get("id") == request_id:
            break
    return answers


def _raw_proxy(setup: Setup, *args: str) -> tuple[list[dict[str, Any]], str, int]:
    """The proxy run by a client that sends initialize and tools/list: what it answered,
    its stderr, its exit status."""
    proc = _started(setup, *args)
    assert proc.stdin is not None and proc.stderr is not None
    answers = _answer(proc, 2)
    proc.stdin.close()
    status = proc.wait(timeout=120)
    return answers, proc.stderr.read(), status


@pytest.mark.parametrize(("upstream", "said"), [
    (["--", "agent-gate-no-such-command"], "cannot start the upstream"),
    (["--", sys.executable, "-c", "raise SystemExit(3)"], "closed the connection"),
    (["--", sys.executable, "-c", "print('hello, I am not MCP')"], "closed the connection"),
    (["--upstream-url", "http://127.0.0.1:9/mcp"], "cannot reach the upstream"),
], ids=["not-found", "exits-at-once", "not-mcp", "unreachable-url"])
def test_a_bad_upstream_is_one_line_a_nonzero_exit_and_an_error_for_the_client(
    tmp_path: Path, upstream: list[str], said: str,
) -> None:
    answers, stderr, status = _raw_proxy(Setup(tmp_path), *upstream)
    assert status != 0
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and said in lines[0], stderr
    (error,) = [a for a in answers if a.get("id") == 2]
    assert "agent-gate mcp proxy" in error["error"]["message"], error


def test_without_restart_a_dead_upstream_stops_the_proxy_with_one_line(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    proc = _started(setup, "--no-upstream-restart", "--", sys.executable, str(UPSTREAM))
    try:
        listed = _answer(proc, 2)[-1]
        assert listed["result"]["tools"], listed  # serving: now the upstream dies
        kill(Upstream(setup).pid())
        status = proc.wait(timeout=120)  # the client still holds stdin open
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    assert status != 0 and "Traceback" not in stderr
    assert "not restarted (--no-upstream-restart)" in stderr.strip().splitlines()[-1], stderr
