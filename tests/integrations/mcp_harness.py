"""What the MCP tests share: a ledger and a side-effect log per test, the proxy as a
real subprocess (``python -m agent_gate mcp proxy``) in front of the real upstream
server ``mcp_upstream.py``, and a real MCP client session to it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.session import ElicitationFnT, MessageHandlerFnT

from agent_gate.ledger import Ledger

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for waiting
from waiting import wait_until

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
UPSTREAM = HERE / "mcp_upstream.py"
POLICY = HERE / "mcp_policy.yaml"


def dead(pid: int) -> bool:
    """The process is gone, or a zombie none of whose threads still runs.

    Why the threads: a SIGKILLed process whose main thread has exited shows ``Z`` while
    its other threads are still exiting, and they hold its files: the upstream's stdin
    pipe, read by a thread of the SDK's stdio server, is then still open, and a request
    written to it goes into the pipe (sent, so in doubt), not against a closed one.
    Its thread list is down to the main thread once the others have closed their files.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        threads = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):  # reaped before or while read
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X") and threads in ([], [str(pid)])


@dataclass(frozen=True)
class Setup:
    """One test's ledger, side-effect log and environment."""

    tmp: Path
    policy: Path = POLICY
    url: str | None = None
    """The ledger's URL (a PostgreSQL schema's); default: a SQLite file under ``tmp``."""

    @property
    def db(self) -> str:
        return self.url or f"sqlite:///{self.tmp / 'ledger.db'}"

    @property
    def log(self) -> Path:
        return self.tmp / "side-effects.log"

    @property
    def env(self) -> dict[str, str]:
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        return dict(os.environ, MCP_UPSTREAM_LOG=str(self.log), PYTHONPATH=path)

    def lines(self) -> list[str]:
        """Every run of a tool that changes something, as the upstream recorded it."""
        return self.log.read_text("utf-8").splitlines() if self.log.exists() else []

    def upstream(self) -> StdioServerParameters:
        return StdioServerParameters(command=sys.executable, args=[str(UPSTREAM)], env=self.env)

    def proxy_args(
        self, *options: str, upstream_url: str | None = None, upstream: Sequence[str] = (),
    ) -> list[str]:
        """The proxy's command line, in front of the server at ``upstream_url`` when given,
        else of the stdio server ``upstream`` starts (default: ``mcp_upstream.py``)."""
        tail = (["--upstream-url", upstream_url] if upstream_url is not None
                else ["--", *(upstream or (sys.executable, str(UPSTREAM)))])
        return ["-m", "agent_gate", "mcp", "proxy", "--policy", str(self.policy), "--db", self.db,
                *options, *tail]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``agent-gate ARGS --db DB`` as an operator runs it, in its own process."""
        return subprocess.run(
            [sys.executable, "-m", "agent_gate", *args, "--db", self.db],
            env=self.env, capture_output=True, text=True, timeout=120, check=False,
        )

    async def acli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return await anyio.to_thread.run_sync(lambda: self.cli(*args))

    def state(self, task: str, call_id: str) -> str | None:
        with Ledger(self.db) as ledger:
            rec = ledger.get(task, call_id)
            return rec.state.value if rec is not None else None

    @asynccontextmanager
    async def proxy(
        self, *options: str, elicitation: ElicitationFnT | None = None,
        message_handler: MessageHandlerFnT | None = None, upstream_url: str | None = None,
    ) -> AsyncIterator[ClientSession]:
        """A client session with a freshly started proxy process; it stops on exit."""
        params = StdioServerParameters(
            command=sys.executable, args=self.proxy_args(*options, upstream_url=upstream_url),
            env=self.env, cwd=str(ROOT),
        )
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, elicitation_callback=elicitation,
                          message_handler=message_handler) as session,
        ):
            await session.initialize()
            yield session

    @contextmanager
    def http_proxy(
        self, *options: str, upstream_url: str | None = None, upstream: Sequence[str] = (),
    ) -> Iterator[str]:
        """A proxy process serving Streamable HTTP on a free loopback port, in front of
        ``upstream_url`` or ``upstream`` (as ``proxy_args``); its URL."""
        port = free_port()
        args = self.proxy_args("--listen", f"127.0.0.1:{port}", *options,
                               upstream_url=upstream_url, upstream=upstream)
        proc = subprocess.Popen([sys.executable, *args], env=self.env, cwd=str(ROOT))
        try:
            wait_until(lambda: _accepts(port, proc), what=f"the proxy to listen on {port}")
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            proc.terminate()
            proc.wait(timeout=60)


def free_port() -> int:
    """A loopback port nothing listens on now (the kernel's pick)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _accepts(port: int, proc: subprocess.Popen[bytes], what: str = "the proxy") -> bool:
    """Whether ``port`` accepts a connection yet; fails at once when ``proc`` (``what``,
    the process meant to listen there) has exited."""
    if proc.poll() is not None:
        raise AssertionError(f"{what} exited with status {proc.returncode}")
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True
