"""Fixtures for the local server's own tests: it is checked at the HTTP level,
with plain httpx and with a raw socket where the chunked framing itself matters."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from agent_gate.stream_server import StreamServer, Transcript

TRANSCRIPTS = Path(__file__).parent / "transcripts"


@pytest.fixture
def letters() -> Transcript:
    events = [{"event": "delta", "data": f'{{"letter": "{c}"}}'} for c in "abcdefgh"]
    events.append({"event": "done", "data": "{}"})
    return Transcript(events)


@pytest.fixture
def server(letters: Transcript) -> Iterator[StreamServer]:
    with StreamServer({"letters": letters}, join_timeout=2.0) as srv:
        yield srv
    assert srv.unfinished_threads == 0


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=httpx.Timeout(5.0)) as c:
        yield c


RawGet = Callable[..., tuple[bytes, list[int], bytes, bool]]


@pytest.fixture
def raw_get(server: StreamServer) -> RawGet:
    """GET over a bare socket; returns (head, chunk sizes, body, saw the terminator).

    TCP may merge or split writes, but the chunked framing names each write's
    size, so the server's chunking is observable exactly.
    """

    def get(
        path: str, headers: dict[str, str] | None = None
    ) -> tuple[bytes, list[int], bytes, bool]:
        host, port = server.url.removeprefix("http://").split(":")
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode()
        data = bytearray()
        with socket.create_connection((host, int(port)), timeout=5.0) as sock:
            sock.sendall(request)
            while True:
                piece = sock.recv(65536)
                if not piece:
                    break
                data += piece
        head, _, rest = bytes(data).partition(b"\r\n\r\n")
        sizes: list[int] = []
        body = bytearray()
        complete = False
        pos = 0
        while pos < len(rest):
            end = rest.find(b"\r\n", pos)
            if end < 0:
                break
            size = int(rest[pos:end], 16)
            if size == 0:
                complete = True
                break
            chunk = rest[end + 2 : end + 2 + size]
            body += chunk
            if len(chunk) < size:
                break
            sizes.append(size)
            pos = end + 2 + size + 2
        return head, sizes, bytes(body), complete

    return get
