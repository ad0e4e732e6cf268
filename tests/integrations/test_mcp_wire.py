"""The proxy's stdio transport against real processes: how far a ``tools/call`` request
written to an upstream that was SIGKILLed got (issue 31).

Only one thing decides whether a request can have reached a stdio upstream: whether
its bytes went into a pipe that something still reads. So a request written after
every reader of the upstream's stdin is gone is ``NOT_SENT`` (the proxy answers
"unavailable", and the call stays runnable), however the event loop happened to
order the death and the write; one written while a reader is alive is ``SENT``
(in doubt if no answer comes), even when the process the proxy started is gone and
a child of it holds the pipe. Each test kills the upstream and waits, blocking the
event loop, until the kernel has taken it down, then sends: the loop has seen
nothing of the death when the request is handed to the transport, the order in
which the proxy under load once met it (``test_mcp_red_team_upstream``'s
``[stdio]`` step "before the request is sent", which came back in doubt).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import anyio
import mcp.types as mt
from mcp.shared.message import SessionMessage
from mcp_harness import dead
from waiting import wait_until

from agent_gate.integrations.mcp.wire import IDEMPOTENCY_KEY_META, Deliveries, Sent, stdio_transport

_SLEEPER = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"
"""An upstream that holds its stdin open and never reads it, its pid in a file."""
_PARENT = (
    "import os, subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "open(sys.argv[1], 'w').write(f'{os.getpid()} {child.pid}')\n"
    "time.sleep(600)\n"
)
"""An upstream whose child inherits its stdin (as ``npx`` does for the server it runs)."""


def pids(path: Path) -> list[int]:
    said = wait_until(lambda: path.exists() and path.read_text(), what="the upstream's pids")
    return [int(p) for p in said.split()]


def call(key: str) -> SessionMessage:
    return SessionMessage(mt.JSONRPCRequest(
        jsonrpc="2.0", id=1, method="tools/call",
        params={"name": "append_note", "arguments": {"text": "b"},
                "_meta": {IDEMPOTENCY_KEY_META: key}}))


async def written(script: str, pidfile: Path) -> tuple[Sent, bool]:
    """Start ``script``, SIGKILL the process started, wait (the loop blocked) until it is
    dead, send a request: how far it got, and whether the link was told it is lost."""
    wire, lost = Deliveries(), anyio.Event()
    command = [sys.executable, "-c", script, str(pidfile)]
    async with stdio_transport(command, dict(os.environ), wire, lost) as (from_server,
                                                                          to_server):
        started, *children = await anyio.to_thread.run_sync(pids, pidfile)
        try:
            os.kill(started, signal.SIGKILL)
            wait_until(lambda: dead(started), what="the upstream to die")  # the loop blocked
            wire.expect("k")
            await to_server.send(call("k"))
            # The stream holds no message: once a second one is taken (or refused, the
            # writer having stopped), the first was written or given up.
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await to_server.send(SessionMessage(mt.JSONRPCNotification(
                    jsonrpc="2.0", method="notifications/initialized")))
            return wire.take("k"), lost.is_set()
        finally:
            for pid in children:  # out of the transport's reach once their parent died
                os.kill(pid, signal.SIGKILL)
            with anyio.fail_after(60):  # the server's stdout read to its end, then closed
                async for _ in from_server:
                    pass


def test_a_request_written_after_the_upstream_died_was_not_sent(tmp_path: Path) -> None:
    """Its line met a pipe nobody reads: it cannot have run, so the call is unavailable,
    never in doubt; and the link learns the upstream is lost."""
    sent, lost = anyio.run(written, _SLEEPER, tmp_path / "pid")
    assert sent is Sent.NOT_SENT
    assert lost


def test_a_request_written_while_a_child_still_reads_the_pipe_may_have_reached_it(
    tmp_path: Path,
) -> None:
    """The process the proxy started is dead, but its child holds the pipe: the line is in
    a pipe someone may read, so the call may have run (in doubt if no answer comes)."""
    sent, lost = anyio.run(written, _PARENT, tmp_path / "pids")
    assert sent is Sent.SENT
    assert not lost


def test_a_request_written_to_a_live_upstream_was_sent(tmp_path: Path) -> None:
    async def main() -> tuple[Sent, bool]:
        wire, lost = Deliveries(), anyio.Event()
        command = [sys.executable, "-c", _SLEEPER, str(tmp_path / "pid")]
        async with stdio_transport(command, dict(os.environ), wire, lost) as (_, to_server):
            await anyio.to_thread.run_sync(pids, tmp_path / "pid")
            wire.expect("k")
            await to_server.send(call("k"))
            await to_server.send(SessionMessage(mt.JSONRPCNotification(
                jsonrpc="2.0", method="notifications/initialized")))
            return wire.take("k"), lost.is_set()

    assert anyio.run(main) == (Sent.SENT, False)
