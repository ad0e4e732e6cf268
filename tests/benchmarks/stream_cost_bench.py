"""Section 7: CPU per KB of tool-call arguments, streamed against handed in.

One call of a ``write_report`` tool with arguments of 1, 16 and 256 KB (a title,
tags and a list of records of mixed-script text) reaches the gate two ways:

* **streamed**: one provider response in that protocol's wire shape, the
  arguments cut into deltas of 2 to 50 characters (the recordings in
  ``tests/recorded`` send deltas of a few characters to a few dozen), the
  response's bytes read in seeded random cuts of 1 to 4096 bytes, decoded by
  agent-gate's ``SSEDecoder`` and driven through ``Gate.run(provider=...)``:
  OpenAI Responses (``response.function_call_arguments.delta``), Chat Completions
  (``tool_calls[].function.arguments`` chunks), Anthropic (``input_json_delta``)
  and Gemini (the whole ``args`` object in one ``functionCall`` part, as Gemini
  sends it);
* **handed in**: ``gate.execute(task, {"call_id", "name", "arguments": <the same
  dict>})``.

Both run the same no-op tool on the same SQLite ledger (WAL, ``synchronous=FULL``
as the ledger sets it), each round on a new task so every call runs. Beside them,
**decode only** is the streamed path without the gate or the ledger (SSE decoder
and accumulator, the call parsed strictly: ``stream_calls``), so the ledger's share
of the streamed cost is visible, and the **floor** is ``json.loads`` of the joined
argument text plus its SHA-256: the least any path that parses and hashes the
arguments does. Every figure is process CPU (``time.process_time``) per KB of
argument text, a median over paired rounds; the ratio streamed / handed in is the
median of the per-round ratios. Before anything is timed, each stream must give
the call with exactly the arguments handed in, and run the tool once.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness import paired, paired_ratio

from agent_gate import Gate, ToolRegistry
from agent_gate.accumulate import Accumulator, stream_calls
from agent_gate.calls import CallStatus
from agent_gate.ledger import CallState
from agent_gate.sse import ServerSentEvent, SSEDecoder

KIB = 1024
SIZES_KB = (1, 16, 256)
PROTOCOLS = ("openai-responses", "openai-chat", "anthropic", "gemini")
TOOL = "write_report"
TARGET_RATIO = 3.0
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["title", "records"],
    "properties": {
        "title": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "records": {"type": "array", "items": {"type": "object"}},
    },
}


def make_arguments(size_kb: int, seed: int = 5) -> dict[str, Any]:
    """About ``size_kb`` KB of JSON text: records of mixed-script words and numbers."""
    rnd = random.Random(seed)
    words = ["report", "Zahlung", "paiement", "请款", "überfällig", "réf.", "2025", "OK", 'a"b']
    records: list[dict[str, Any]] = []
    args: dict[str, Any] = {
        "title": "Quarterly report",
        "tags": ["q3", "finance"],
        "records": records,
    }
    size = len(json.dumps(args))
    n = 0
    while size < size_kb * KIB:
        record = {
            "id": n,
            "amount": round(rnd.uniform(0, 10_000), 2),
            "note": " ".join(rnd.choice(words) for _ in range(rnd.randint(3, 12))),
            "done": rnd.random() < 0.5,
        }
        records.append(record)
        size += len(json.dumps(record)) + 2
        n += 1
    return args


def split(text: str, seed: int = 9) -> list[str]:
    """The argument text cut into deltas of 2 to 50 characters."""
    rnd = random.Random(seed)
    pieces: list[str] = []
    at = 0
    while at < len(text):
        step = rnd.randint(2, 50)
        pieces.append(text[at : at + step])
        at += step
    return pieces


def _sse(lines: list[tuple[str | None, Any]]) -> bytes:
    out: list[str] = []
    for event, payload in lines:
        data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
        out.append((f"event: {event}\n" if event else "") + f"data: {data}\n\n")
    return "".join(out).encode()


def _obfuscation(rnd: random.Random) -> str:
    return "".join(rnd.choice("abcdefXYZ0123") for _ in range(rnd.randint(1, 15)))


def responses_body(text: str, deltas: list[str]) -> bytes:
    rnd = random.Random(1)
    item_id = "fc_087fd66e6fa25afd0069689b33ab908193943bbfb9aea1ff4c"
    item = {
        "id": item_id,
        "type": "function_call",
        "status": "in_progress",
        "arguments": "",
        "call_id": "call_X6173PYkiubC8YJRPzr8osHX",
        "name": TOOL,
    }
    response = {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}
    seq = itertools.count()
    lines: list[tuple[str | None, Any]] = [
        (
            "response.created",
            {"type": "response.created", "response": response, "sequence_number": next(seq)},
        ),
        (
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "item": item,
                "output_index": 0,
                "sequence_number": next(seq),
            },
        ),
    ]
    kind = "response.function_call_arguments.delta"
    for delta in deltas:
        lines.append(
            (
                kind,
                {
                    "type": kind,
                    "delta": delta,
                    "item_id": item_id,
                    "obfuscation": _obfuscation(rnd),
                    "output_index": 0,
                    "sequence_number": next(seq),
                },
            )
        )
    done = {**item, "status": "completed", "arguments": text}
    lines += [
        (
            "response.function_call_arguments.done",
            {
                "type": "response.function_call_arguments.done",
                "arguments": text,
                "item_id": item_id,
                "output_index": 0,
                "sequence_number": next(seq),
            },
        ),
        (
            "response.output_item.done",
            {
                "type": "response.output_item.done",
                "item": done,
                "output_index": 0,
                "sequence_number": next(seq),
            },
        ),
        (
            "response.completed",
            {
                "type": "response.completed",
                "response": {**response, "status": "completed", "output": [done]},
                "sequence_number": next(seq),
            },
        ),
    ]
    return _sse(lines)


def chat_body(text: str, deltas: list[str]) -> bytes:
    rnd = random.Random(2)
    head = {
        "id": "chatcmpl-CyCLBKWYPMz8kH6QazFUjF5Oq06qK",
        "object": "chat.completion.chunk",
        "created": 1768463153,
        "model": "gpt-4o-2024-08-06",
        "service_tier": "default",
        "system_fingerprint": "fp_deacdd5f6f",
        "usage": None,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            **head,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            "obfuscation": _obfuscation(rnd),
        }

    lines: list[tuple[str | None, Any]] = [
        (None, chunk({"role": "assistant", "content": None})),
        (
            None,
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_NnkmjbtYL9gdZnGOMxYEl0A3",
                            "type": "function",
                            "function": {"name": TOOL, "arguments": ""},
                        }
                    ]
                }
            ),
        ),
    ]
    for delta in deltas:
        lines.append(
            (None, chunk({"tool_calls": [{"index": 0, "function": {"arguments": delta}}]}))
        )
    lines += [(None, chunk({}, "tool_calls")), (None, "[DONE]")]
    return _sse(lines)


def anthropic_body(text: str, deltas: list[str]) -> bytes:
    lines: list[tuple[str | None, Any]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "model": "claude-sonnet-4-20250514",
                    "id": "msg_013zKrzHmx2EAPhcF2gQKQ4k",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 416, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {
                    "type": "tool_use",
                    "id": "toolu_015cUijgET79LXjgeYQerN2h",
                    "name": TOOL,
                    "input": {},
                },
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": ""},
            },
        ),
    ]
    for delta in deltas:
        lines.append(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": delta},
                },
            )
        )
    lines += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 109},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return _sse(lines)


def gemini_body(args: dict[str, Any]) -> bytes:
    tail = {"modelVersion": "gemini-2.5-flash", "responseId": "dqHOab6xGLzWodAPkPuViA4"}
    lines: list[tuple[str | None, Any]] = [
        (
            None,
            {
                "candidates": [
                    {
                        "content": {
                            "role": "model",
                            "parts": [{"functionCall": {"name": TOOL, "args": args}}],
                        }
                    }
                ],
                **tail,
            },
        ),
        (
            None,
            {
                "candidates": [
                    {"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP"}
                ],
                "usageMetadata": {"promptTokenCount": 26, "totalTokenCount": 181},
                **tail,
            },
        ),
    ]
    return _sse(lines)


def body(protocol: str, args: dict[str, Any], deltas: list[str]) -> bytes:
    text = "".join(deltas)
    if protocol == "openai-responses":
        return responses_body(text, deltas)
    if protocol == "openai-chat":
        return chat_body(text, deltas)
    if protocol == "anthropic":
        return anthropic_body(text, deltas)
    return gemini_body(args)


def random_cuts(raw: bytes, seed: int = 11, largest: int = 4 * KIB) -> list[bytes]:
    rnd = random.Random(seed)
    chunks: list[bytes] = []
    at = 0
    while at < len(raw):
        step = rnd.randint(1, largest)
        chunks.append(raw[at : at + step])
        at += step
    return chunks


def sse_events(chunks: list[bytes]) -> Iterator[ServerSentEvent]:
    decoder = SSEDecoder()
    for chunk in chunks:
        yield from decoder.feed(chunk)
    decoder.end()


class _Tool:
    """The no-op tool, counting its runs (each streamed call must run exactly once)."""

    def __init__(self) -> None:
        self.runs = 0
        self.tools = ToolRegistry()

        def write_report(**arguments: Any) -> dict[str, Any]:
            self.runs += 1
            return {"ok": True}

        self.tools.register(write_report, name=TOOL, schema=SCHEMA, effect="read")


def _workload(size_kb: int, rounds: int, gate: Gate, tool: _Tool) -> dict[str, Any]:
    args = make_arguments(size_kb)
    text = json.dumps(args)
    deltas = split(text)
    kb = len(text.encode()) / KIB
    calls = max(1, 32 // size_kb)  # calls per round: enough CPU per round to time
    tasks = itertools.count()
    bodies = {p: random_cuts(body(p, args, deltas)) for p in PROTOCOLS}

    def streamed(protocol: str) -> Callable[[], None]:
        chunks = bodies[protocol]

        def run() -> None:
            for _ in range(calls):
                gate.run(sse_events(chunks), task_id=f"s{size_kb}-{next(tasks)}", provider=protocol)

        return run

    def decoded(protocol: str) -> Callable[[], None]:
        chunks = bodies[protocol]

        def run() -> None:
            for _ in range(calls):
                for _call in stream_calls(chunks, Accumulator(protocol)):
                    pass

        return run

    def handed() -> None:
        for n in range(calls):
            gate.execute(
                f"h{size_kb}-{next(tasks)}",
                {"call_id": f"call_{n}", "name": TOOL, "arguments": args},
            )

    def floor() -> None:
        joined = "".join(deltas)
        for _ in range(calls):
            json.loads(joined)
            hashlib.sha256(joined.encode()).digest()

    # Same answer before anything is timed: the streamed call is the handed-in one.
    for protocol in PROTOCOLS:
        got = list(stream_calls(bodies[protocol], Accumulator(protocol)))
        assert [(c.name, c.status, c.arguments) for c in got] == [
            (TOOL, CallStatus.COMPLETE, args)
        ], protocol
        before = tool.runs
        result = gate.run(
            sse_events(bodies[protocol]), task_id=f"check-{size_kb}-{protocol}", provider=protocol
        )
        assert [o.state for o in result.outcomes] == [CallState.SUCCEEDED], protocol
        assert tool.runs == before + 1, protocol
    assert gate.execute(
        f"check-{size_kb}", {"call_id": "c", "name": TOOL, "arguments": args}
    ).result == {"ok": True}

    candidates: dict[str, Callable[[], None]] = {"handed in": handed, "floor": floor}
    for protocol in PROTOCOLS:
        candidates[f"streamed {protocol}"] = streamed(protocol)
        candidates[f"decode only {protocol}"] = decoded(protocol)
    cpu = paired(candidates, rounds, clock=time.process_time)
    per_kb = {name: s.median / calls / kb * 1e6 for name, s in cpu.items()}
    return {
        "size_kb": size_kb,
        "argument_bytes": len(text.encode()),
        "deltas": len(deltas),
        "mean_delta_chars": len(text) / len(deltas),
        "wire_bytes": {p: sum(map(len, bodies[p])) for p in PROTOCOLS},
        "calls_per_round": calls,
        "cpu_us_per_kb": per_kb,
        "cpu_us_per_kb_range": {
            name: (s.low / calls / kb * 1e6, s.high / calls / kb * 1e6) for name, s in cpu.items()
        },
        "streamed_vs_handed": {
            p: paired_ratio(cpu, "handed in", f"streamed {p}") for p in PROTOCOLS
        },
        "decode_vs_handed": {
            p: paired_ratio(cpu, "handed in", f"decode only {p}") for p in PROTOCOLS
        },
    }


def run_section(quick: bool) -> dict[str, Any]:
    rounds = 5 if quick else 11
    tool = _Tool()
    with tempfile.TemporaryDirectory() as tmp:
        gate = Gate(tool.tools, f"sqlite:///{Path(tmp) / 'ledger.db'}", create=True)
        with gate:
            sizes = [_workload(size, rounds, gate, tool) for size in SIZES_KB]
    return {"rounds": rounds, "sizes": sizes}


def markdown(section: dict[str, Any]) -> list[str]:
    first = section["sizes"][0]
    lines = [
        f"One `{TOOL}` call; arguments cut into deltas of 2-50 characters (mean "
        f"{first['mean_delta_chars']:.0f}); the response's bytes in random reads of 1-4096 bytes; "
        f"SQLite ledger (WAL, synchronous=FULL); {section['rounds']} paired rounds. CPU "
        "(process time) per KB of argument text; ratio = streamed / handed in, paired.",
        "",
        "| arguments | candidate | CPU per KB | min-max | / handed in (paired) |",
        "|---:|---|---:|---:|---:|",
    ]
    for size in section["sizes"]:
        per_kb, rng = size["cpu_us_per_kb"], size["cpu_us_per_kb_range"]
        ratios = {f"streamed {p}": r for p, r in size["streamed_vs_handed"].items()}
        ratios |= {f"decode only {p}": r for p, r in size["decode_vs_handed"].items()}
        for name in per_kb:
            ratio = ratios.get(name)
            lines.append(
                f"| {size['size_kb']} KB ({size['deltas']:,} deltas) | {name} | "
                f"{per_kb[name]:,.1f} us | {rng[name][0]:,.1f}-{rng[name][1]:,.1f} | "
                f"{f'{ratio:.2f}x' if ratio is not None else '-'} |"
            )
    lines.append("")
    return lines


def targets(section: dict[str, Any]) -> list[tuple[str, bool, str]]:
    verdicts = []
    for protocol in PROTOCOLS:
        ratios = {s["size_kb"]: s["streamed_vs_handed"][protocol] for s in section["sizes"]}
        worst = max(ratios.values())
        shown = ", ".join(
            f"{kb} KB {r:.2f}x ({s['cpu_us_per_kb'][f'streamed {protocol}']:,.0f} vs "
            f"{s['cpu_us_per_kb']['handed in']:,.0f} us/KB)"
            for (kb, r), s in zip(ratios.items(), section["sizes"], strict=True)
        )
        verdicts.append(
            (
                f"Streamed {protocol} CPU per KB <= {TARGET_RATIO:g}x handed in (paired, "
                "1/16/256 KB)",
                worst <= TARGET_RATIO,
                shown,
            )
        )
    return verdicts
