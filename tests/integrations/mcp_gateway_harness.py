"""What the gateway tests share: the proxy as a real process in front of the real
``mcp_features.py`` server, reached by real SDK clients over stdio or loopback HTTP."""

from __future__ import annotations

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

import mcp.types as mt
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from agent_gate.ledger import Ledger

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for waiting
from waiting import wait_until

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
FEATURES = HERE / "mcp_features.py"
POLICY = HERE / "mcp_features_policy.yaml"


def text(result: mt.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, mt.TextContent))


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass(frozen=True)
class Gateway:
    """One test's ledger, policy and side-effect log, and how to start the proxy."""

    tmp: Path
    policy: Path = POLICY
    upstream_flags: tuple[str, ...] = ()
    upstream_url: str | None = None
    """Reach ``mcp_features.py --http`` here instead of starting it over stdio."""

    @property
    def db(self) -> str:
        return f"sqlite:///{self.tmp / 'ledger.db'}"

    @property
    def log(self) -> Path:
        return self.tmp / "side-effects.log"

    @property
    def env(self) -> dict[str, str]:
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        return dict(os.environ, MCP_UPSTREAM_LOG=str(self.log), PYTHONPATH=path)

    @property
    def stderr(self) -> Path:
        """What an HTTP proxy wrote on stderr."""
        return self.tmp / "proxy.stderr"

    def lines(self) -> list[str]:
        return self.log.read_text("utf-8").splitlines() if self.log.exists() else []

    def args(self, *options: str) -> list[str]:
        upstream = (["--upstream-url", self.upstream_url] if self.upstream_url is not None
                    else ["--", sys.executable, str(FEATURES), *self.upstream_flags])
        return ["-m", "agent_gate", "mcp", "proxy", "--policy", str(self.policy), "--db",
                self.db, *options, *upstream]

    @contextmanager
    def http_upstream(self) -> Iterator[Gateway]:
        """``mcp_features.py`` serving Streamable HTTP; this gateway in front of it."""
        port = _free_port()
        proc = subprocess.Popen([sys.executable, str(FEATURES), "--http", str(port),
                                 *self.upstream_flags], env=self.env, cwd=str(ROOT))
        try:
            wait_until(lambda: _accepts(port, proc), what="the HTTP upstream to listen")
            yield Gateway(self.tmp, self.policy, self.upstream_flags,
                          f"http://127.0.0.1:{port}/mcp")
        finally:
            proc.kill()
            proc.wait(timeout=60)

    def state(self, task: str, call_id: str) -> str | None:
        with Ledger(self.db) as ledger:
            rec = ledger.get(task, call_id)
            return rec.state.value if rec is not None else None

    @asynccontextmanager
    async def stdio(self, *options: str, **callbacks: Any) -> AsyncIterator[ClientSession]:
        """A client session with a proxy process served over stdio."""
        params = StdioServerParameters(command=sys.executable, args=self.args(*options),
                                       env=self.env, cwd=str(ROOT))
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, **callbacks) as session,
        ):
            await session.initialize()
            yield session

    @contextmanager
    def http(self, *options: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
        """A proxy process serving Streamable HTTP on a free loopback port."""
        port = _free_port()
        with self.stderr.open("ab") as err:
            proc = subprocess.Popen(
                [sys.executable, *self.args("--listen", f"127.0.0.1:{port}", *options)],
                env=self.env, cwd=str(ROOT), stderr=err,
            )
        try:
            wait_until(lambda: _accepts(port, proc), what=f"the proxy to listen on {port}")
            yield f"http://127.0.0.1:{port}/mcp", proc
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


@asynccontextmanager
async def http_client(url: str, **callbacks: Any) -> AsyncIterator[ClientSession]:
    async with (
        streamable_http_client(url) as (read, write),
        ClientSession(read, write, **callbacks) as session,
    ):
        await session.initialize()
        yield session


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _accepts(port: int, proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is not None:
        raise AssertionError(f"the process exited with status {proc.returncode}")
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True
