"""Section 5: what each fast path buys on the workload it was written for.

Every shortcut in agent-gate sits beside a reference that gives the same answer
(``agent_gate._speedups`` lists them), and each one costs code to read and to
test. A shortcut stays only if it pays: at least 5% on a benchmark target. Here
each one is switched off in-process, alone (the module global its fast path
reads, or the method it adds), and timed against the code as it is, paired, on
the workloads of sections 1 and 2 that it serves. ``gain`` is the median over
rounds of time(off) / time(on) - 1: 0.25 means the shortcut makes that workload
25% faster. Times are CPU time of this process (the machines are shared).

Two shortcuts went after this section measured them under 1% of the decision
path (the per-call work is a few percent of a call whose events cost over a
millisecond): msgspec's strict argument parse (``strict_json``) and orjson's
canonical bytes (``plainjson``). Section 2's "once per call" group still times
that work on its own.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import decision_bench as db
import sse_bench as sb
from harness import paired, paired_ratio
from sse_peers import agent_gate

from agent_gate import accumulate as accumulate_module
from agent_gate.providers import base as providers_base
from agent_gate.providers.base import ProviderAdapter
from agent_gate.providers.openai_responses import OpenAIResponsesAdapter
from agent_gate.sse import decoder as decoder_module

THRESHOLD = 0.05
"""The least gain on one of its targets for a shortcut to be kept."""


@dataclass(frozen=True)
class Trick:
    name: str
    where: str
    off: Callable[[], contextlib.AbstractContextManager[None]]
    workloads: tuple[str, ...]


@contextlib.contextmanager
def _set(owner: Any, attribute: str, value: Any) -> Iterator[None]:
    saved = getattr(owner, attribute)
    setattr(owner, attribute, value)
    try:
        yield
    finally:
        setattr(owner, attribute, saved)


def _off(
    owner: Any, attribute: str, value: Any
) -> Callable[[], contextlib.AbstractContextManager[None]]:
    return lambda: _set(owner, attribute, value)


_SSE = ("SSE random cuts (LF)", "SSE random cuts (CRLF)", "SSE 64 KiB reads", "SSE 1 KiB reads")
_DECISION = ("decision path, parsed events in", "decision path, SSE events in")

TRICKS = [
    Trick(
        "SSE short path (tail framing)",
        "sse/decoder.py feed",
        _off(decoder_module, "_SHORT_PATH", False),
        _SSE,
    ),
    Trick(
        "SSE bulk runs (C-level build)",
        "sse/decoder.py _dispatch",
        _off(decoder_module, "_BULK_RUNS", False),
        _SSE,
    ),
    Trick(
        "SSE one big event (find, no tokenizer)",
        "sse/decoder.py _one_big_event",
        _off(decoder_module, "_BIG_EVENT", False),
        ("SSE one 4 MiB event in 1 KiB reads",),
    ),
    Trick(
        "msgspec per-event decode",
        "providers/base.py loads_event",
        _off(providers_base, "fast_loads", None),
        ("SSE + per-event JSON decode", "decision path, SSE events in"),
    ),
    Trick(
        "orjson event snapshot (replay content)",
        "providers/base.py mapping_content",
        _off(providers_base, "_fast_dumps", None),
        _DECISION,
    ),
    Trick(
        "known-adapter path",
        "accumulate.py _feed_known",
        _off(accumulate_module, "_KNOWN_ADAPTER_PATH", False),
        _DECISION,
    ),
    Trick(
        "hot_delta (fragment without a normalized event)",
        "providers/*.py hot_delta",
        _off(OpenAIResponsesAdapter, "hot_delta", ProviderAdapter.hot_delta),
        _DECISION,
    ),
]


def _workloads(quick: bool) -> dict[str, Callable[[], object]]:
    total = 5 * sb.MIB if quick else 50 * sb.MIB
    lf = sb.responses_stream(total)
    crlf = sb.responses_stream(total, crlf=True)
    cuts_lf = sb.random_cuts(lf)
    cuts_crlf = sb.random_cuts(crlf, seed=12)
    reads_64k = sb.fixed(lf, 64 * sb.KIB)
    reads_1k = sb.fixed(lf, sb.KIB)
    big = sb.fixed(sb.big_event(4 * sb.MIB), sb.KIB)

    def decode_and_parse() -> None:
        load = providers_base.loads_event
        for event in agent_gate(cuts_lf):
            load(event[1])

    registry = db._registry()
    tool = registry.get("send_email")
    assert tool is not None
    arguments = db.make_arguments()
    events = db.call_events(json.dumps(arguments, ensure_ascii=False))
    sse = db.as_sse(events)
    calls = 20 if quick else 50

    def decision(feed: list[Any]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(calls):
                parsed = db.accumulate(feed)
                tool.validate(parsed)
                db.arguments_hash(parsed)

        return run

    return {
        "SSE random cuts (LF)": lambda: agent_gate(cuts_lf),
        "SSE random cuts (CRLF)": lambda: agent_gate(cuts_crlf),
        "SSE 64 KiB reads": lambda: agent_gate(reads_64k),
        "SSE 1 KiB reads": lambda: agent_gate(reads_1k),
        "SSE one 4 MiB event in 1 KiB reads": lambda: agent_gate(big),
        "SSE + per-event JSON decode": decode_and_parse,
        "decision path, parsed events in": decision(events),
        "decision path, SSE events in": decision(sse),
    }


def run_section(quick: bool) -> dict[str, Any]:
    rounds = 15 if quick else 31
    workloads = _workloads(quick)
    rows: list[dict[str, Any]] = []
    for trick in TRICKS:
        gains: dict[str, float] = {}
        for label in trick.workloads:
            work = workloads[label]

            def off(work: Callable[[], object] = work, trick: Trick = trick) -> None:
                with trick.off():
                    work()

            with trick.off():
                work()  # the same answer both ways was checked by the tests; warm up
            series = paired({"on": work, "off": off}, rounds, clock=time.process_time)
            gains[label] = paired_ratio(series, "on", "off") - 1
        best = max(gains.values())
        rows.append(
            {
                "trick": trick.name,
                "where": trick.where,
                "gains": gains,
                "best_gain": best,
                "pays": best >= THRESHOLD,
            }
        )
    return {"rounds": rounds, "threshold": THRESHOLD, "rows": rows}


def markdown(section: dict[str, Any]) -> list[str]:
    lines = [
        f"Each shortcut off alone against the code as it is, paired over "
        f"{section['rounds']} rounds; gain = time(off) / time(on) - 1, per workload. "
        f"A shortcut pays at {section['threshold']:.0%} on one of its targets.",
        "",
        "| trick | where | gain per workload | pays |",
        "|---|---|---|---|",
    ]
    for row in section["rows"]:
        gains = "; ".join(f"{label}: {gain:+.0%}" for label, gain in row["gains"].items())
        lines.append(
            f"| {row['trick']} | {row['where']} | {gains} | {'yes' if row['pays'] else '**no**'} |"
        )
    lines.append("")
    return lines
