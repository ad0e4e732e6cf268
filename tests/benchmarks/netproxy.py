"""A loopback TCP proxy that delays each direction and counts round trips.

    python tests/benchmarks/netproxy.py --listen 127.0.0.1:0 \\
        --upstream 127.0.0.1:5432 --delay-ms 1.5 [--report-every 5]

Why: on one machine a database answers in microseconds, so a client that spends
twenty round trips a call looks as fast as one that spends two, and workers wait on
this machine's cores instead of on the network. Between the clients and the server
this proxy holds every chunk for ``delay_ms`` in each direction (order kept), as a
network a few hundred kilometres long would, and counts round trips per connection:
a client->server burst followed by a server->client reply is one round trip, so a
pipelined batch of statements answered together counts once. Counts are exact and
repeatable, unlike timings.

Standalone (no project imports) and importable: ``Proxy(upstream, delay_ms)`` runs
its own event loop in a daemon thread (``start``/``stop``, or ``with``), and
``connections()`` / ``round_trips()`` / ``reset()`` read and clear the counters.
One asyncio loop with ``Protocol`` callbacks (no task per chunk) serves a few dozen
concurrent connections at little CPU; writes are paused end to end when a reader
falls behind (flow control), so a slow side never grows the buffers without bound.
The CLI prints the listening address on its first line (``listening HOST:PORT``)
and, with ``--report-every``, one JSON line of counts per interval; on SIGINT or
SIGTERM it prints the final counts and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ConnStats", "Proxy", "ProxyProcess", "main"]


@dataclass
class ConnStats:
    """What one proxied connection carried."""

    id: int
    round_trips: int = 0
    """Client->server bursts answered by the server (see the module docstring)."""
    to_server_bytes: int = 0
    to_client_bytes: int = 0
    opened_at: float = field(default_factory=time.monotonic)
    closed: bool = False


class _Delayed:
    """Writes chunks to ``transport`` ``delay`` seconds after they were read, in order.

    One timer at a time per direction (the head of the queue's due time): chunks
    read together are written together, and asyncio's timer heap, which does not
    order equal deadlines, is never asked to keep them in order.
    """

    __slots__ = ("closing", "delay", "handle", "loop", "queue", "transport")

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        self.loop = loop
        self.delay = delay
        self.transport: asyncio.Transport | None = None
        self.queue: deque[tuple[float, bytes]] = deque()
        self.handle: asyncio.TimerHandle | None = None
        self.closing = False

    def send(self, data: bytes) -> None:
        if self.delay <= 0 and self.transport is not None and not self.queue:
            self.transport.write(data)
            return
        self.queue.append((self.loop.time() + self.delay, data))
        self._arm()

    def close_after(self) -> None:
        """Close the transport once every queued chunk has been written."""
        self.closing = True
        self._arm()

    def _arm(self) -> None:
        if self.handle is not None or self.transport is None:
            return
        if self.queue:
            self.handle = self.loop.call_at(self.queue[0][0], self._drain)
        elif self.closing:
            self.transport.close()

    def _drain(self) -> None:
        self.handle = None
        transport = self.transport
        if transport is None:
            return
        now = self.loop.time()
        ready: list[bytes] = []
        while self.queue and self.queue[0][0] <= now:
            ready.append(self.queue.popleft()[1])
        if ready and not transport.is_closing():
            transport.write(b"".join(ready) if len(ready) > 1 else ready[0])
        self._arm()

    def attach(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self._arm()


class _Upstream(asyncio.Protocol):
    """The proxy's connection to the server."""

    def __init__(self, link: _Client) -> None:
        self.link = link

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.link.upstream_made(transport)

    def data_received(self, data: bytes) -> None:
        self.link.from_server(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.server_gone()

    def pause_writing(self) -> None:
        self.link.pause_client_reading()

    def resume_writing(self) -> None:
        self.link.resume_client_reading()


class _Client(asyncio.Protocol):
    """One accepted client connection and its upstream pair."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        loop = proxy.loop
        assert loop is not None
        self.loop = loop
        self.to_server = _Delayed(loop, proxy.delay)
        self.to_client = _Delayed(loop, proxy.delay)
        self.stats = proxy._new_stats()
        self.awaiting_reply = False
        self.client: asyncio.Transport | None = None
        self.server: asyncio.Transport | None = None

    # client side
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.client = transport
        self.to_client.attach(transport)
        host, port = self.proxy.upstream
        connect = self.loop.create_connection(lambda: _Upstream(self), host, port)
        task = self.loop.create_task(connect)
        task.add_done_callback(self._connected)

    def _connected(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled() or task.exception() is not None:
            if self.client is not None:
                self.client.close()
            self.stats.closed = True

    def upstream_made(self, transport: asyncio.Transport) -> None:
        self.server = transport
        self.to_server.attach(transport)
        if self.client is None or self.client.is_closing():
            transport.close()

    def data_received(self, data: bytes) -> None:
        stats = self.stats
        stats.to_server_bytes += len(data)
        self.awaiting_reply = True
        self.to_server.send(data)

    def eof_received(self) -> bool:
        self.to_server.close_after()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.stats.closed = True
        self.to_server.close_after()

    def pause_writing(self) -> None:  # the client reads slowly: stop reading the server
        if self.server is not None:
            self.server.pause_reading()

    def resume_writing(self) -> None:
        if self.server is not None:
            self.server.resume_reading()

    # server side
    def from_server(self, data: bytes) -> None:
        stats = self.stats
        stats.to_client_bytes += len(data)
        if self.awaiting_reply:
            self.awaiting_reply = False
            stats.round_trips += 1
        self.to_client.send(data)

    def server_gone(self) -> None:
        self.to_client.close_after()

    def pause_client_reading(self) -> None:
        if self.client is not None:
            self.client.pause_reading()

    def resume_client_reading(self) -> None:
        if self.client is not None:
            self.client.resume_reading()


class Proxy:
    """A delaying, counting TCP proxy on its own event loop thread."""

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        delay_ms: float = 0.0,
        listen: tuple[str, int] = ("127.0.0.1", 0),
    ) -> None:
        self.upstream = upstream
        self.delay = delay_ms / 1000.0
        self.listen = listen
        self.loop: asyncio.AbstractEventLoop | None = None
        self.address: tuple[str, int] | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stats: list[ConnStats] = []
        self._next_id = 0

    def _new_stats(self) -> ConnStats:
        with self._lock:
            self._next_id += 1
            stats = ConnStats(self._next_id)
            self._stats.append(stats)
            return stats

    async def serve(self) -> None:
        """Listen (on the running loop); ``address`` is set when this returns."""
        self.loop = asyncio.get_running_loop()
        host, port = self.listen
        self._server = await self.loop.create_server(lambda: _Client(self), host, port)
        sock = self._server.sockets[0].getsockname()
        self.address = (sock[0], sock[1])

    def start(self) -> Proxy:
        """Run on a daemon thread; returns once it listens."""
        ready = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.serve())
            except BaseException as error:  # reported to start()'s caller
                failed.append(error)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="netproxy", daemon=True)
        self._thread.start()
        ready.wait()
        if failed:
            raise failed[0]
        return self

    def stop(self) -> None:
        loop, thread = self.loop, self._thread
        if loop is None or thread is None:
            return

        def shut() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.stop()

        loop.call_soon_threadsafe(shut)
        thread.join(timeout=5)
        self._thread = None

    def __enter__(self) -> Proxy:
        return self.start() if self._thread is None else self

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self.address is not None, "not listening yet"
        return self.address[1]

    def connections(self) -> list[ConnStats]:
        """A copy of every connection's counts since the last ``reset``."""
        with self._lock:
            return [ConnStats(**asdict(s)) for s in self._stats]

    def round_trips(self) -> int:
        """Round trips over every connection since the last ``reset``."""
        with self._lock:
            return sum(s.round_trips for s in self._stats)

    def reset(self) -> None:
        """Zero the counts; closed connections are forgotten."""
        with self._lock:
            for s in self._stats:
                s.round_trips = s.to_server_bytes = s.to_client_bytes = 0
            self._stats = [s for s in self._stats if not s.closed]

    def report(self) -> dict[str, Any]:
        conns = self.connections()
        return {
            "round_trips": sum(c.round_trips for c in conns),
            "connections": [asdict(c) for c in conns],
        }


class ProxyProcess:
    """``Proxy`` in a process of its own, driven over a pipe (``port``, ``reset``,
    ``round_trips``, ``close``).

    In the measuring process the proxy's loop thread would compete for the GIL
    with the client it measures, billing the proxy's CPU to the client (more so
    to a client that sends more chunks); in its own process it does not.
    """

    def __init__(self, upstream: tuple[str, int], *, delay_ms: float = 0.0) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve_pipe, args=(child, upstream, delay_ms),
                                 daemon=True, name="netproxy")
        self._proc.start()
        child.close()
        self.port: int = self._conn.recv()

    def _ask(self, command: str) -> Any:
        self._conn.send(command)
        return self._conn.recv()

    def reset(self) -> None:
        self._ask("reset")

    def round_trips(self) -> int:
        return int(self._ask("round_trips"))

    def report(self) -> dict[str, Any]:
        return dict(self._ask("report"))

    def close(self) -> None:
        if self._proc.is_alive():
            with contextlib.suppress(EOFError, OSError):
                self._ask("stop")
            self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.kill()
        self._conn.close()

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _serve_pipe(conn: Any, upstream: tuple[str, int], delay_ms: float) -> None:
    proxy = Proxy(upstream, delay_ms=delay_ms).start()
    conn.send(proxy.port)
    answers = {"reset": proxy.reset, "round_trips": proxy.round_trips, "report": proxy.report}
    while True:
        try:
            command = conn.recv()
        except EOFError:
            break
        if command == "stop":
            conn.send(None)
            break
        conn.send(answers[command]())
    proxy.stop()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=_address, default=("127.0.0.1", 0))
    parser.add_argument("--upstream", type=_address, required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0,
                        help="added to each direction (order kept)")
    parser.add_argument("--report-every", type=float, default=0.0,
                        help="print a JSON line of counts every this many seconds")
    args = parser.parse_args(argv)
    proxy = Proxy(args.upstream, delay_ms=args.delay_ms, listen=args.listen)

    async def run() -> None:
        await proxy.serve()
        assert proxy.address is not None
        print(f"listening {proxy.address[0]}:{proxy.address[1]}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), args.report_every or None)
            except TimeoutError:
                print(json.dumps(proxy.report()), flush=True)
        print(json.dumps(proxy.report()), flush=True)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
