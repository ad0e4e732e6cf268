"""Section 1: SSE decoding, agent-gate against its peers.

Workload: a generated OpenAI-Responses-style stream, mostly
``response.function_call_arguments.delta`` events with small deltas, fed in
64 KiB reads, 1 KiB reads, reads cut at random points, and with CRLF line
endings cut at random points; plus one big event (1 MiB, 4 MiB) fed in 1 KiB
reads, to show that the cost is linear in the event's size.

Before anything is timed, every candidate's events are compared with
agent-gate's; a candidate that disagrees is reported and not timed. A
conformance table shows which spec rules each candidate keeps.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness import paired, paired_ratio
from sse_peers import Candidate, Event, agent_gate, limit, peers

KIB = 1024
MIB = 1024 * KIB


def responses_stream(total_bytes: int, *, crlf: bool = False, seed: int = 7) -> bytes:
    """Deltas of a few characters each, as real tool-call argument streams are."""
    rnd = random.Random(seed)
    alphabet = 'abcdefghij "{}:,\\\u00e9\u4e2d'
    parts: list[bytes] = []
    size = 0
    seq = 0
    eol = "\r\n" if crlf else "\n"
    while size < total_bytes:
        delta = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 8)))
        payload = json.dumps(
            {
                "type": "response.function_call_arguments.delta",
                "sequence_number": seq,
                "item_id": "fc_68a1b2c3d4e5f6a7b8c9d0e1",
                "output_index": seq % 3,
                "delta": delta,
            },
            separators=(",", ":"),
        )
        block = (
            f"event: response.function_call_arguments.delta{eol}data: {payload}{eol}{eol}"
        ).encode()
        parts.append(block)
        size += len(block)
        seq += 1
    return b"".join(parts)


def big_event(size: int) -> bytes:
    return b"event: big\ndata: " + b"x" * size + b"\n\n"


def fixed(stream: bytes, size: int) -> list[bytes]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


def random_cuts(stream: bytes, seed: int = 11, largest: int = 4 * KIB) -> list[bytes]:
    rnd = random.Random(seed)
    chunks: list[bytes] = []
    at = 0
    while at < len(stream):
        step = rnd.randint(1, largest)
        chunks.append(stream[at : at + step])
        at += step
    return chunks


# -- conformance: rules that peers are known to get wrong ---------------------------


@dataclass(frozen=True)
class Case:
    rule: str
    chunks: list[bytes]
    expected: list[Event]


CASES = [
    Case(
        "CR at end of read + LF at start of next = one line end",
        [b"data: a\r", b"\ndata: b\r\n\r\n"],
        [("message", "a\nb", "")],
    ),
    Case(
        "lone CR ends lines",
        [b"data: a\r\rdata: b\r\r"],
        [("message", "a", ""), ("message", "b", "")],
    ),
    Case(
        "U+2028 is not a line end", ["data: a\u2028b\n\n".encode()], [("message", "a\u2028b", "")]
    ),
    Case(
        "NEL (U+0085) is not a line end",
        ["data: a\u0085b\n\n".encode()],
        [("message", "a\u0085b", "")],
    ),
    Case(
        "no dispatch at EOF without blank line", [b"data: a\n\ndata: {}\n"], [("message", "a", "")]
    ),
    Case(
        "block without data dispatches nothing",
        [b"event: x\nid: 1\n\ndata: a\n\n"],
        [("message", "a", "1")],
    ),
    Case("empty data: dispatches an empty event", [b"data:\n\n"], [("message", "", "")]),
    Case("invalid UTF-8 becomes U+FFFD", [b"data: a\xffb\n\n"], [("message", "a\ufffdb", "")]),
    Case(
        "multi-byte character split across reads",
        [b"data: \xe4\xb8", b"\xad\n\n"],
        [("message", "\u4e2d", "")],
    ),
    Case("one leading BOM removed", [b"\xef\xbb\xbfdata: a\n\n"], [("message", "a", "")]),
    Case(
        "id containing NUL ignored",
        [b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n"],
        [("message", "a", "1"), ("message", "b", "1")],
    ),
    Case("field names are case-sensitive", [b"Data: no\ndata: yes\n\n"], [("message", "yes", "")]),
]


def conformance(candidates: dict[str, Candidate]) -> dict[str, dict[str, bool]]:
    table: dict[str, dict[str, bool]] = {}
    for name, run in candidates.items():
        table[name] = {}
        for case in CASES:
            try:
                ok = [tuple(e) for e in run(list(case.chunks))] == case.expected
            except Exception:  # a peer that raises on a rule fails it
                ok = False
            table[name][case.rule] = ok
    return table


# -- timing --------------------------------------------------------------------------


def _same(run: Candidate, chunks: list[bytes], expected: list[Event]) -> bool:
    try:
        return [tuple(e) for e in run(chunks)] == expected
    except Exception:
        return False


def run_section(quick: bool) -> dict[str, Any]:
    total = 5 * MIB if quick else 50 * MIB
    rounds = 3 if quick else 7
    lf = responses_stream(total)
    crlf = responses_stream(total, crlf=True)
    workloads = {
        "64 KiB reads": (fixed(lf, 64 * KIB), b"\n\n"),
        "1 KiB reads": (fixed(lf, KIB), b"\n\n"),
        "random cuts (LF)": (random_cuts(lf), b"\n\n"),
        "random cuts (CRLF)": (random_cuts(crlf, seed=12), b"\r\n\r\n"),
    }
    others = peers()
    result: dict[str, Any] = {
        "stream_bytes": total,
        "rounds": rounds,
        "conformance": conformance({"agent-gate": agent_gate, **others}),
        "workloads": {},
    }
    for label, (chunks, separator) in workloads.items():
        expected = agent_gate(chunks)
        candidates: dict[str, Candidate] = {"agent-gate": agent_gate}
        excluded: list[str] = []
        for name, run in {**others, "limit (split+decode only)": limit(separator)}.items():
            if name.startswith("limit") or _same(run, chunks, expected):
                candidates[name] = run
            else:
                excluded.append(name)
        series = paired({n: (lambda r=r, c=chunks: r(c)) for n, r in candidates.items()}, rounds)
        peer_names = [
            n for n in candidates if n not in ("agent-gate",) and not n.startswith("limit")
        ]
        fastest = min(peer_names, key=lambda n: series[n].median) if peer_names else None
        rows = []
        for name, s in series.items():
            rows.append(
                {
                    "candidate": name,
                    "median_s": s.median,
                    "min_s": s.low,
                    "max_s": s.high,
                    "events_per_s": len(expected) / s.median,
                    "us_per_event": s.median / len(expected) * 1e6,
                    "ratio_vs_fastest_peer": (
                        paired_ratio(series, name, fastest) if fastest else None
                    ),
                }
            )
        result["workloads"][label] = {
            "events": len(expected),
            "fastest_peer": fastest,
            "excluded_wrong_events": excluded,
            "rows": rows,
        }
    result["decode_and_parse"] = _decode_and_parse(workloads["random cuts (LF)"][0], rounds)
    result["big_event"] = _big_events(rounds)
    result["memory"] = _memory(lf)
    return result


_JSON_LIBRARIES = (("orjson", "orjson", "loads"), ("msgspec", "msgspec.json", "decode"))
OWN_DECODE = "its own per-event decode (the provider path)"


def _json_parsers() -> dict[str, Callable[[str], Any]]:
    """agent-gate's real per-event decode first, then the bare libraries for comparison.

    The first is what an adapter does with each event's data
    (``ProviderAdapter.load_payload``: msgspec with a json.loads fallback that keeps
    json.loads's verdicts, then the object check), so the target is judged on the
    path the accumulator actually takes, not on a bare library call.
    """
    from agent_gate.providers import adapter_for

    adapter = adapter_for("openai-responses")
    found: dict[str, Callable[[str], Any]] = {
        OWN_DECODE: lambda text: adapter.load_payload(text, 0),
        "json.loads": json.loads,
    }
    for label, module, attr in _JSON_LIBRARIES:
        with contextlib.suppress(ImportError):
            found[label] = getattr(__import__(module, fromlist=[attr]), attr)
    return found


def _decode_and_parse(chunks: list[bytes], rounds: int) -> dict[str, Any]:
    """CPU per event for what every event costs before any provider logic: the SSE
    decoder plus one JSON decode of its data, agent-gate's own and each library's."""
    from agent_gate.sse import SSEDecoder

    def pipeline(loads: Callable[[str], Any]) -> Callable[[], int]:
        def run() -> int:
            decoder = SSEDecoder(max_stream_bytes=1 << 40)
            n = 0
            for chunk in chunks:
                for event in decoder.feed(chunk):
                    loads(event.data)
                    n += 1
            decoder.end()
            return n

        return run

    parsers = _json_parsers()
    events = pipeline(json.loads)()
    sample = agent_gate(chunks[:50])
    for name, loads in parsers.items():
        assert [loads(e[1]) for e in sample] == [json.loads(e[1]) for e in sample], name
    series = paired(
        {f"agent-gate + {name}": pipeline(loads) for name, loads in parsers.items()},
        rounds,
        clock=time.process_time,
    )
    return {
        "events": events,
        "rows": [
            {
                "candidate": name,
                "cpu_us_per_event": s.median / events * 1e6,
                "min_us": s.low / events * 1e6,
                "max_us": s.high / events * 1e6,
            }
            for name, s in series.items()
        ],
    }


def _big_events(rounds: int) -> dict[str, Any]:
    """Linearity: time(4 MiB event) / time(1 MiB event), both fed in 1 KiB reads."""
    chunks = {size: fixed(big_event(size), KIB) for size in (MIB, 4 * MIB)}
    series = paired(
        {f"{size // MIB} MiB": (lambda c=c: agent_gate(c)) for size, c in chunks.items()},
        rounds,
    )
    one, four = series["1 MiB"].median, series["4 MiB"].median
    return {"1 MiB_s": one, "4 MiB_s": four, "ratio": four / one}


def _memory(stream: bytes) -> dict[str, Any]:
    """Peak extra heap while decoding: the events are dropped as they come, so
    what remains is what the decoder itself holds."""
    decoder_chunks = fixed(stream, 64 * KIB)
    from agent_gate.sse import SSEDecoder

    decoder = SSEDecoder(max_stream_bytes=1 << 40)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    for chunk in decoder_chunks:
        decoder.feed(chunk)
    decoder.end()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return {"peak_extra_heap_bytes": peak, "seconds_traced": time.perf_counter() - started}


def targets(section: dict[str, Any]) -> list[tuple[str, bool, str]]:
    verdicts: list[tuple[str, bool, str]] = []
    for label in ("random cuts (LF)", "random cuts (CRLF)", "64 KiB reads"):
        work = section["workloads"][label]
        row = next(r for r in work["rows"] if r["candidate"] == "agent-gate")
        ratio = row["ratio_vs_fastest_peer"]
        verdicts.append(
            (
                f"SSE {label}: >= 2x the fastest correct peer ({work['fastest_peer']})",
                ratio is not None and ratio >= 2.0,
                f"{ratio:.2f}x" if ratio else "no peer",
            )
        )
    big = section["big_event"]
    verdicts.append(
        ("SSE linear: time(4 MiB)/time(1 MiB) <= 5", big["ratio"] <= 5, f"{big['ratio']:.2f}")
    )
    rows = {r["candidate"]: r["cpu_us_per_event"] for r in section["decode_and_parse"]["rows"]}
    own = rows[f"agent-gate + {OWN_DECODE}"]
    verdicts.append(
        (
            "SSE parse + per-event JSON decode <= 5 us CPU per event "
            "(agent-gate's own decode, as the adapters run it)",
            own <= 5,
            f"{own:.2f} us",
        )
    )
    best_name = min(rows, key=lambda n: rows[n])
    if best_name != f"agent-gate + {OWN_DECODE}":
        verdicts.append(
            (
                f"SSE parse + per-event JSON decode <= 5 us CPU per event ({best_name}, "
                "a bare library call)",
                rows[best_name] <= 5,
                f"{rows[best_name]:.2f} us",
            )
        )
    mem = section["memory"]["peak_extra_heap_bytes"]
    verdicts.append(("SSE extra heap while streaming <= 1 MiB", mem <= MIB, f"{mem / MIB:.2f} MiB"))
    return verdicts
