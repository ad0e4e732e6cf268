"""A real HTTP/1.1 server on loopback that replays transcripts and injects faults.

Built on ``http.server.ThreadingHTTPServer`` because it leaves the socket in
our hands: a cut is a real closed socket in the middle of a chunked body, a
drip is a real pause between real writes, and the client under test is a
real ``httpx`` client. Nothing here mocks httpx.

Routes::

    GET|POST /streams/{name}                       the transcript, Last-Event-ID honoured
    POST     /openai/{name}/v1/responses           the transcript (OpenAI Responses create)
    GET      /openai/{name}/v1/responses/{id}?stream=true[&starting_after=N]
                                                   the events after sequence number N

Every response closes its connection (``Connection: close``), so connections
and requests are counted one for one. Every wait in a handler is bounded and
is interrupted by ``close()``, which itself waits a bounded time.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import InitVar, dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from agent_gate.stream_server.faults import (
    CutMode,
    ErrorStyle,
    Fault,
    FaultRule,
    HeartbeatKind,
    error_body,
)
from agent_gate.stream_server.transcript import Transcript

MAX_REQUEST_BODY = 1024 * 1024
_COMMENT = b": keep-alive\n\n"
_PING = b'event: ping\ndata: {"type": "ping"}\n\n'


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What one request carried, for tests to assert on."""

    index: int
    connection: int
    method: str
    path: str
    query: Mapping[str, str]
    last_event_id: str | None
    """The ``Last-Event-ID`` header, ``None`` when absent."""
    body: bytes
    fault: Fault | None
    status: int = 0
    events_sent: int = 0
    """Events of the transcript fully written (heartbeats excluded)."""


@dataclass(slots=True)
class _Outcome:
    """Live progress of one request, updated before the bytes it describes are written
    (so a client never sees bytes the record does not yet count)."""

    status: int = 0
    events_sent: int = 0


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # close() joins handler threads itself, with a bound
    allow_reuse_address = True
    owner: StreamServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read ``StreamServer.requests`` instead of a log."""

    def handle(self) -> None:
        owner = self.server.owner
        self._conn_index = owner._register(self.connection)
        try:
            super().handle()
        except OSError:
            pass  # the client went away; nothing to report to it
        finally:
            owner._unregister(self.connection)

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    # -- routing ----------------------------------------------------------------

    def _dispatch(self) -> None:
        owner = self.server.owner
        self.close_connection = True
        split = urlsplit(self.path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        body = self._read_body()
        last_id = self.headers.get("Last-Event-ID")
        outcome = _Outcome()
        record_index = owner._begin_record(
            self._conn_index, self.command, split.path, query, last_id, body, outcome
        )
        try:
            fault = owner._select_fault(self.command, split.path, query)
        except ValueError as exc:
            self._json_error(outcome, 400, ErrorStyle.OPENAI, str(exc))
            return
        owner._set_fault(record_index, fault)
        self._route(split.path, query, last_id, fault or Fault(), outcome)

    def _route(
        self,
        path: str,
        query: Mapping[str, str],
        last_id: str | None,
        fault: Fault,
        outcome: _Outcome,
    ) -> None:
        owner = self.server.owner
        parts = [p for p in path.split("/") if p]
        if len(parts) == 2 and parts[0] == "streams" and self.command in ("GET", "POST"):
            transcript = owner._transcript(parts[1])
            if transcript is None:
                self._json_error(outcome, 404, fault.error_style, "unknown transcript")
                return
            self._serve_from_last_id(transcript, last_id, fault, outcome)
            return
        if len(parts) >= 4 and parts[0] == "openai" and parts[2:4] == ["v1", "responses"]:
            transcript = owner._transcript(parts[1])
            if transcript is None:
                self._json_error(outcome, 404, ErrorStyle.OPENAI, "unknown transcript")
                return
            if len(parts) == 4 and self.command == "POST":
                self._serve_from_last_id(transcript, last_id, fault, outcome)
                return
            if len(parts) == 5 and self.command == "GET":
                self._serve_retrieve(transcript, parts[4], query, fault, outcome)
                return
        self._json_error(outcome, 404, ErrorStyle.OPENAI, "no such route")

    def _serve_from_last_id(
        self, transcript: Transcript, last_id: str | None, fault: Fault, outcome: _Outcome
    ) -> None:
        start = 0 if fault.ignore_last_event_id else transcript.start_after(last_id)
        if start is None:
            self._json_error(outcome, 400, fault.error_style, "unknown Last-Event-ID")
            return
        self._serve(transcript, start, fault, outcome)

    def _serve_retrieve(
        self,
        transcript: Transcript,
        response_id: str,
        query: Mapping[str, str],
        fault: Fault,
        outcome: _Outcome,
    ) -> None:
        if transcript.response_id() != response_id:
            self._json_error(outcome, 404, ErrorStyle.OPENAI, "No response found with that id.")
            return
        if query.get("stream") != "true":
            self._json_error(outcome, 400, ErrorStyle.OPENAI, "only stream=true is served here")
            return
        start = 0
        raw = query.get("starting_after")
        if raw is not None and not fault.ignore_last_event_id:
            try:
                start = transcript.start_after_sequence(int(raw))
            except ValueError:
                self._json_error(outcome, 400, ErrorStyle.OPENAI, "starting_after: integer")
                return
        self._serve(transcript, start, fault, outcome)

    # -- responses ----------------------------------------------------------------

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(min(length, MAX_REQUEST_BODY)) if length > 0 else b""

    def _json_error(
        self,
        outcome: _Outcome,
        status: int,
        style: ErrorStyle,
        message: str | None,
        retry_after: float | None = None,
    ) -> None:
        owner = self.server.owner
        payload = error_body(status, style, message, request_id=f"req_local{owner._next_id()}")
        outcome.status = status
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Connection", "close")
        if retry_after is not None:
            self.send_header("Retry-After", f"{retry_after:g}")
        self.end_headers()
        self.wfile.write(payload)

    def _serve(self, transcript: Transcript, start: int, fault: Fault, outcome: _Outcome) -> None:
        owner = self.server.owner
        if fault.status is not None:
            self._json_error(
                outcome, fault.status, fault.error_style, fault.error_message, fault.retry_after
            )
            return
        events_body, ends = transcript.encoded(start)
        prefix = f"retry: {owner.retry_ms}\n\n".encode() if owner.retry_ms is not None else b""
        body = prefix + events_body
        ends = [len(prefix) + e for e in ends]
        outcome.status = 200
        self.send_response(200)
        self.send_header("Content-Type", fault.content_type or "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        cut = fault.cut_offset(ends, start=len(prefix))
        limit = len(body) if cut is None else min(cut, len(body))
        _Writer(self, fault, owner._stop, body, len(prefix), ends, limit, outcome).run()
        interrupted = owner._stop.is_set()
        if not interrupted and (cut is None or fault.cut is CutMode.CLEAN):
            self._raw(b"0\r\n\r\n")
        else:
            # A cut: no chunked terminator, and the socket goes away mid-body.
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    def _raw(self, data: bytes) -> None:
        self.wfile.write(data)


@dataclass(eq=False)
class _Writer:
    """Writes one response body according to its fault, one bounded wait at a time."""

    h: _Handler
    fault: Fault
    stop: threading.Event
    body: bytes
    prefix_len: InitVar[int]
    ends: list[int]
    limit: int
    outcome: _Outcome
    boundaries: list[int] = field(init=False)
    rng: random.Random = field(init=False)
    last_heartbeat: float = field(init=False)
    stall_at: int | None = field(init=False)

    def __post_init__(self, prefix_len: int) -> None:
        self.boundaries = [prefix_len, *self.ends]
        self.rng = random.Random(self.fault.seed)
        self.last_heartbeat = time.monotonic()
        k = self.fault.stall_after_events
        ends = self.ends
        if k is None:
            self.stall_at = None
        else:
            self.stall_at = prefix_len if k <= 0 else ends[min(k, len(ends)) - 1] if ends else 0

    def chunk(self, data: bytes) -> None:
        self.h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def heartbeat_due(self) -> bool:
        interval = self.fault.heartbeat_interval
        return interval is not None and time.monotonic() - self.last_heartbeat >= interval

    def send_heartbeat(self) -> None:
        kind = self.fault.heartbeat
        if kind in (HeartbeatKind.COMMENT, HeartbeatKind.BOTH):
            self.chunk(_COMMENT)
        if kind in (HeartbeatKind.PING, HeartbeatKind.BOTH):
            self.chunk(_PING)
        self.last_heartbeat = time.monotonic()

    def next_boundary(self, pos: int) -> int:
        for b in self.boundaries:
            if b > pos:
                return b
        return len(self.body)

    def stall(self) -> None:
        deadline = time.monotonic() + self.fault.stall_seconds
        interval = self.fault.heartbeat_interval
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= deadline:
                return
            if self.heartbeat_due():
                self.send_heartbeat()
                continue
            wake = deadline if interval is None else min(deadline, self.last_heartbeat + interval)
            self.stop.wait(max(wake - now, 0.001))

    def run(self) -> None:
        fault = self.fault
        pos = 0
        stalled = False
        boundary_set = set(self.boundaries)
        while pos < self.limit and not self.stop.is_set():
            if self.stall_at is not None and not stalled and pos >= self.stall_at:
                stalled = True
                self.stall()
                continue
            if pos in boundary_set and self.heartbeat_due():
                self.send_heartbeat()
            if fault.chunk_min is not None and fault.chunk_max is not None:
                end = pos + self.rng.randint(fault.chunk_min, fault.chunk_max)
                if self.heartbeat_due():
                    end = min(end, self.next_boundary(pos))  # finish the event, then beat
            else:
                end = self.next_boundary(pos)  # one event per write
            if self.stall_at is not None and not stalled and pos < self.stall_at:
                end = min(end, self.stall_at)
            end = min(end, self.limit)
            before = self.outcome.events_sent
            self.outcome.events_sent = sum(1 for e in self.ends if e <= end)
            try:
                self.chunk(self.body[pos:end])
            except OSError:
                self.outcome.events_sent = before
                raise
            pos = end
            if fault.drip > 0:
                self.stop.wait(fault.drip)


class StreamServer:
    """Serve transcripts on a free loopback port; a context manager.

    ``faults`` is the script of rules (see ``FaultRule``); query parameters of
    a request add a fault of their own (``stream_url`` builds them).
    ``retry_ms`` makes every stream start with a ``retry:`` field.
    """

    def __init__(
        self,
        transcripts: Mapping[str, Transcript] | None = None,
        *,
        faults: Iterable[FaultRule] = (),
        host: str = "127.0.0.1",
        port: int = 0,
        retry_ms: int | None = None,
        join_timeout: float = 2.0,
    ) -> None:
        self._transcripts: dict[str, Transcript] = dict(transcripts or {})
        self._rules: list[list[Any]] = [[rule, rule.times] for rule in faults]
        self._query_fired: dict[tuple[str, str], int] = {}
        self._host = host
        self._port = port
        self.retry_ms = retry_ms
        self._join_timeout = join_timeout
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._records: list[RequestRecord] = []
        self._outcomes: list[_Outcome] = []
        self._connections = 0
        self._active: dict[socket.socket, threading.Thread] = {}
        self._ids = itertools.count(1)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.unfinished_threads = 0
        """Handler threads still alive when ``close()`` stopped waiting (daemon threads)."""

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> StreamServer:
        if self._httpd is not None:
            raise RuntimeError("StreamServer already started")
        httpd = _HTTPServer((self._host, self._port), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="agent-gate-stream-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving: interrupt handlers, close their sockets, wait a bounded time."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        with self._lock:
            active = list(self._active.items())
        # Sockets first, then the stop flag: a handler woken by the flag finds its
        # socket gone and cannot end a stalled body as if it were complete.
        for sock, _ in active:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._stop.set()
        httpd.shutdown()
        httpd.server_close()
        deadline = time.monotonic() + self._join_timeout
        if self._thread is not None:
            self._thread.join(max(deadline - time.monotonic(), 0))
        for _, thread in active:
            thread.join(max(deadline - time.monotonic(), 0))
        self.unfinished_threads = sum(1 for _, t in active if t.is_alive())

    def __enter__(self) -> StreamServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- addresses ------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("StreamServer is not running")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def stream_url(self, name: str, fault: Fault | None = None, times: int | None = None) -> str:
        """URL of transcript ``name``, with ``fault`` as query parameters if given."""
        url = f"{self.url}/streams/{name}"
        params = fault.to_query() if fault is not None else {}
        if times is not None:
            params["times"] = str(times)
        return f"{url}?{urlencode(params)}" if params else url

    def openai_url(self, name: str) -> str:
        """The ``.../v1/responses`` create URL serving transcript ``name``."""
        return f"{self.url}/openai/{name}/v1/responses"

    # -- configuration ----------------------------------------------------------------

    def add_transcript(self, name: str, transcript: Transcript) -> None:
        with self._lock:
            self._transcripts[name] = transcript

    def add_faults(self, *rules: FaultRule) -> None:
        with self._lock:
            self._rules.extend([rule, rule.times] for rule in rules)

    # -- observation ------------------------------------------------------------------

    @property
    def connections(self) -> int:
        with self._lock:
            return self._connections

    @property
    def requests(self) -> list[RequestRecord]:
        """Every request so far, with its status and events sent as of now."""
        with self._lock:
            return [
                replace(r, status=o.status, events_sent=o.events_sent)
                for r, o in zip(self._records, self._outcomes, strict=True)
            ]

    @property
    def last_event_ids(self) -> list[str | None]:
        """The ``Last-Event-ID`` each request carried, in arrival order."""
        return [r.last_event_id for r in self.requests]

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no request is being served; ``False`` if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._active:
                    return True
            time.sleep(0.01)
        with self._lock:
            return not self._active

    # -- used by handlers -------------------------------------------------------------

    def _register(self, sock: socket.socket) -> int:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._connections += 1
            self._active[sock] = threading.current_thread()
            return self._connections

    def _unregister(self, sock: socket.socket) -> None:
        with self._lock:
            self._active.pop(sock, None)

    def _next_id(self) -> int:
        return next(self._ids)

    def _transcript(self, name: str) -> Transcript | None:
        with self._lock:
            return self._transcripts.get(name)

    def _begin_record(
        self,
        connection: int,
        method: str,
        path: str,
        query: Mapping[str, str],
        last_id: str | None,
        body: bytes,
        outcome: _Outcome,
    ) -> int:
        with self._lock:
            index = len(self._records)
            self._records.append(
                RequestRecord(index, connection, method, path, dict(query), last_id, body, None)
            )
            self._outcomes.append(outcome)
            return index

    def _set_fault(self, index: int, fault: Fault | None) -> None:
        with self._lock:
            self._records[index] = replace(self._records[index], fault=fault)

    def _select_fault(self, method: str, path: str, query: Mapping[str, str]) -> Fault | None:
        from_query = Fault.from_query(query)
        with self._lock:
            if from_query is not None:
                times = int(query["times"]) if "times" in query else None
                key = (path, json.dumps(from_query.to_query(), sort_keys=True))
                fired = self._query_fired.get(key, 0)
                if times is None or fired < times:
                    self._query_fired[key] = fired + 1
                    return from_query
            for entry in self._rules:
                rule, left = entry
                if (left is None or left > 0) and rule.matches(method, path):
                    if left is not None:
                        entry[1] = left - 1
                    return rule.fault
        return None
