"""The local server over real sockets: what it serves, how it breaks, how it stops."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest

from agent_gate.sse import ServerSentEvent, SSEDecoder
from agent_gate.stream_server import (
    CutMode,
    ErrorStyle,
    Fault,
    FaultRule,
    HeartbeatKind,
    StreamServer,
    Transcript,
)


def read_all(client: httpx.Client, url: str, **kwargs: object) -> tuple[httpx.Response, bytes, str]:
    """The body bytes and how the body ended: ``complete`` or the httpx error name."""
    data = bytearray()
    method = str(kwargs.pop("method", "GET"))
    with client.stream(method, url, **kwargs) as response:  # type: ignore[arg-type]
        try:
            for chunk in response.iter_raw():
                data += chunk
        except httpx.TransportError as exc:
            return response, bytes(data), type(exc).__name__
    return response, bytes(data), "complete"


def decode(raw: bytes) -> tuple[list[ServerSentEvent], bool, int]:
    decoder = SSEDecoder()
    events = decoder.feed(raw)
    end = decoder.end()
    return events, end.discarded_partial_event, end.comments


def test_serves_the_transcript_as_a_chunked_event_stream(
    server: StreamServer, client: httpx.Client, letters: Transcript
) -> None:
    response, body, ending = read_all(client, server.stream_url("letters"))
    assert ending == "complete"
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["transfer-encoding"] == "chunked"
    assert response.headers["cache-control"] == "no-cache"
    assert body == letters.encoded()[0]
    events, partial, _ = decode(body)
    assert [e.id for e in events] == [str(i) for i in range(1, 10)]
    assert not partial


def test_retry_field_prefix(letters: Transcript, client: httpx.Client) -> None:
    with StreamServer({"letters": letters}, retry_ms=1500) as srv:
        _, body, _ = read_all(client, srv.stream_url("letters"))
    assert body.startswith(b"retry: 1500\n\n")
    decoder = SSEDecoder()
    decoder.feed(body)
    assert decoder.retry == 1500


def test_last_event_id_replays_from_the_next_event(
    server: StreamServer, client: httpx.Client
) -> None:
    _, body, _ = read_all(client, server.stream_url("letters"), headers={"Last-Event-ID": "6"})
    events, _, _ = decode(body)
    assert [e.id for e in events] == ["7", "8", "9"]
    _, body, _ = read_all(client, server.stream_url("letters"), headers={"Last-Event-ID": "9"})
    assert body == b""
    assert server.last_event_ids == ["6", "9"]
    assert server.connections == 2


def test_unknown_last_event_id_is_refused_not_guessed(
    server: StreamServer, client: httpx.Client
) -> None:
    response, body, _ = read_all(
        client, server.stream_url("letters"), headers={"Last-Event-ID": "nope"}
    )
    assert response.status_code == 400
    assert json.loads(body)["error"]["message"] == "unknown Last-Event-ID"


def test_ignoring_last_event_id_replays_everything(
    server: StreamServer, client: httpx.Client, letters: Transcript
) -> None:
    url = server.stream_url("letters", Fault(ignore_last_event_id=True))
    _, body, _ = read_all(client, url, headers={"Last-Event-ID": "6"})
    assert body == letters.encoded()[0]


@pytest.mark.parametrize("mode", [CutMode.ABORT, CutMode.CLEAN])
def test_cut_after_events(
    server: StreamServer, client: httpx.Client, letters: Transcript, mode: CutMode
) -> None:
    _, body, ending = read_all(
        client, server.stream_url("letters", Fault(cut_after_events=3, cut=mode))
    )
    assert ending == ("complete" if mode is CutMode.CLEAN else "RemoteProtocolError")
    assert body == letters.encoded()[0][: letters.encoded()[1][2]]
    events, partial, _ = decode(body)
    assert len(events) == 3 and not partial
    assert server.requests[0].events_sent == 3


def test_cut_inside_an_event_leaves_a_partial_event(
    server: StreamServer, client: httpx.Client, letters: Transcript
) -> None:
    _, body, ending = read_all(client, server.stream_url("letters", Fault(cut_inside_event=4)))
    assert ending == "RemoteProtocolError"
    full, ends = letters.encoded()
    assert ends[3] < len(body) < ends[4]
    assert body == full[: len(body)]
    events, partial, _ = decode(body)
    assert len(events) == 4 and partial


def test_cut_at_an_exact_byte(server: StreamServer, client: httpx.Client) -> None:
    _, body, _ = read_all(client, server.stream_url("letters", Fault(cut_at_byte=77)))
    assert len(body) == 77


def test_random_chunk_sizes_are_seeded_and_bounded(raw_get, letters: Transcript) -> None:  # type: ignore[no-untyped-def]
    query = "?chunk_min=2&chunk_max=6&seed=11"
    head, sizes, body, complete = raw_get("/streams/letters" + query)
    assert head.startswith(b"HTTP/1.1 200")
    assert complete
    assert body == letters.encoded()[0]
    assert all(2 <= s <= 6 for s in sizes[:-1])
    assert len(set(sizes)) > 1
    again = raw_get("/streams/letters" + query)[1]
    other = raw_get("/streams/letters?chunk_min=2&chunk_max=6&seed=12")[1]
    assert again == sizes
    assert other != sizes


def test_unchunked_plan_writes_one_event_per_chunk(raw_get, letters: Transcript) -> None:  # type: ignore[no-untyped-def]
    _, sizes, _, complete = raw_get("/streams/letters")
    _, ends = letters.encoded()
    assert complete
    assert sizes == [b - a for a, b in zip([0, *ends], ends, strict=False)]


def test_an_aborted_cut_has_no_chunked_terminator(raw_get) -> None:  # type: ignore[no-untyped-def]
    _, _, _, complete = raw_get("/streams/letters?cut_after_events=2")
    assert not complete
    _, _, _, complete = raw_get("/streams/letters?cut_after_events=2&cut=clean")
    assert complete


@pytest.mark.parametrize("kind", list(HeartbeatKind))
def test_heartbeats_flow_during_a_stall(
    server: StreamServer, client: httpx.Client, letters: Transcript, kind: HeartbeatKind
) -> None:
    fault = Fault(stall_after_events=2, stall_seconds=0.3, heartbeat_interval=0.05, heartbeat=kind)
    _, body, ending = read_all(client, server.stream_url("letters", fault))
    assert ending == "complete"
    events, _, comments = decode(body)
    pings = [e for e in events if e.event == "ping"]
    real = [e for e in events if e.event != "ping"]
    assert len(real) == 9
    # pings come only at event boundaries, so every real event is intact
    assert [e.data for e in real] == [e.data for e in letters.events]
    if kind is HeartbeatKind.COMMENT:
        assert comments >= 3 and not pings
    elif kind is HeartbeatKind.PING:
        assert len(pings) >= 3 and comments == 0
    else:
        assert comments >= 3 and len(pings) >= 3


def test_heartbeats_with_random_chunks_never_split_an_event(
    server: StreamServer, client: httpx.Client, letters: Transcript
) -> None:
    fault = Fault(
        chunk_min=1, chunk_max=6, drip=0.005, heartbeat_interval=0.02, heartbeat=HeartbeatKind.PING
    )
    _, body, _ = read_all(client, server.stream_url("letters", fault))
    events, partial, _ = decode(body)
    assert not partial
    assert [e.data for e in events if e.event != "ping"] == [e.data for e in letters.events]
    assert any(e.event == "ping" for e in events)


def test_wrong_content_type_serves_the_bytes_under_that_type(
    server: StreamServer, client: httpx.Client, letters: Transcript
) -> None:
    response, body, _ = read_all(
        client, server.stream_url("letters", Fault(content_type="text/html"))
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html"
    assert body == letters.encoded()[0]


@pytest.mark.parametrize(
    ("status", "style"),
    [
        (429, ErrorStyle.OPENAI),
        (500, ErrorStyle.OPENAI),
        (529, ErrorStyle.ANTHROPIC),
        (503, ErrorStyle.GEMINI),
    ],
)
def test_error_statuses_with_json_bodies(
    server: StreamServer, client: httpx.Client, status: int, style: ErrorStyle
) -> None:
    fault = Fault(status=status, error_style=style, retry_after=2)
    response, body, _ = read_all(client, server.stream_url("letters", fault))
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert response.headers["retry-after"] == "2"
    assert "error" in json.loads(body)
    assert server.requests[0].status == status


def test_fault_scripts_fire_a_bounded_number_of_times(
    letters: Transcript, client: httpx.Client
) -> None:
    rules = [
        FaultRule(Fault(status=500), times=2, method="POST"),
        FaultRule(Fault(cut_after_events=1), times=1),
    ]
    with StreamServer({"letters": letters}, faults=rules) as srv:
        statuses = [
            read_all(client, srv.stream_url("letters"), method="POST")[0].status_code
            for _ in range(3)
        ]
        endings = [read_all(client, srv.stream_url("letters"))[2] for _ in range(2)]
    assert statuses == [500, 500, 200]
    # the third POST took the cut rule (the first that still matched)
    assert endings == ["complete", "complete"]
    assert [r.fault for r in srv.requests] == [rules[0].fault] * 2 + [rules[1].fault, None, None]


def test_query_faults_fire_a_bounded_number_of_times(
    server: StreamServer, client: httpx.Client
) -> None:
    url = server.stream_url("letters", Fault(status=429), times=1)
    assert read_all(client, url)[0].status_code == 429
    assert read_all(client, url)[0].status_code == 200
    forever = server.stream_url("letters", Fault(status=503))
    assert [read_all(client, forever)[0].status_code for _ in range(3)] == [503] * 3


def test_unknown_fault_parameter_is_a_400(server: StreamServer, client: httpx.Client) -> None:
    response, body, _ = read_all(client, server.url + "/streams/letters?cut_afterr=1")
    assert response.status_code == 400
    assert "cut_afterr" in json.loads(body)["error"]["message"]


def test_unknown_routes_and_transcripts_are_404(server: StreamServer, client: httpx.Client) -> None:
    assert read_all(client, server.url + "/nope")[0].status_code == 404
    assert read_all(client, server.url + "/streams/nope")[0].status_code == 404


def test_requests_are_recorded(server: StreamServer, client: httpx.Client) -> None:
    read_all(
        client,
        server.stream_url("letters"),
        method="POST",
        json={"a": 1},
        headers={"Last-Event-ID": "2"},
    )
    record = server.requests[0]
    assert (record.method, record.path, record.last_event_id) == ("POST", "/streams/letters", "2")
    assert json.loads(record.body) == {"a": 1}
    assert record.events_sent == 7
    assert record.connection == 1


def test_openai_retrieve_honours_starting_after(client: httpx.Client) -> None:
    events = [
        {
            "event": "response.created",
            "data": json.dumps({"sequence_number": 0, "response": {"id": "resp_7"}}),
        }
    ]
    events += [
        {
            "event": "response.output_text.delta",
            "data": json.dumps({"sequence_number": i, "delta": str(i)}),
        }
        for i in range(1, 5)
    ]
    with StreamServer({"r": Transcript(events)}) as srv:
        _, body, _ = read_all(client, srv.openai_url("r"), method="POST", json={})
        assert len(decode(body)[0]) == 5
        _, body, _ = read_all(client, srv.openai_url("r") + "/resp_7?stream=true&starting_after=2")
        assert [json.loads(e.data)["sequence_number"] for e in decode(body)[0]] == [3, 4]
        assert read_all(client, srv.openai_url("r") + "/resp_8?stream=true")[0].status_code == 404
        assert read_all(client, srv.openai_url("r") + "/resp_7")[0].status_code == 400


def test_close_interrupts_stalled_handlers_within_its_bound(letters: Transcript) -> None:
    srv = StreamServer({"letters": letters}, join_timeout=2.0).start()
    url = srv.stream_url("letters", Fault(stall_after_events=1, stall_seconds=60.0))
    started = threading.Event()
    outcome: list[str] = []

    def reader() -> None:
        with httpx.Client(timeout=10.0) as c, c.stream("GET", url) as response:
            try:
                for _ in response.iter_raw():
                    started.set()
                outcome.append("complete")
            except httpx.TransportError as exc:
                outcome.append(type(exc).__name__)

    thread = threading.Thread(target=reader)
    thread.start()
    assert started.wait(5.0)
    begin = time.monotonic()
    srv.close()
    assert time.monotonic() - begin < 2.0  # a 60 s stall does not hold the shutdown
    thread.join(5.0)
    assert not thread.is_alive()
    assert srv.unfinished_threads == 0
    assert outcome == ["RemoteProtocolError"]
    srv.close()  # idempotent


def test_server_lifecycle_errors(letters: Transcript) -> None:
    srv = StreamServer({"letters": letters})
    with pytest.raises(RuntimeError):
        _ = srv.url
    with srv:
        assert srv.url.startswith("http://127.0.0.1:")
        with pytest.raises(RuntimeError):
            srv.start()


def test_standalone_entry_point_serves_files_for_a_bounded_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent_gate.stream_server.__main__ import main

    path = tmp_path / "rec.sse"
    path.write_bytes(b"event: a\ndata: 1\n\nevent: b\ndata: 2\n\n")
    assert main([f"mine={path}", str(path), "--seconds", "0.05", "--ids", "none"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[0] for line in lines] == ["mine", "rec"]
    assert lines[0].split(": ")[1].endswith("/streams/mine")
