"""Run the benchmarks and write results/latest.json and results/latest.md.

    python tests/benchmarks/run.py [--quick]

Not collected by pytest: benchmarks are measurements, never assertions. Peers
come from the ``bench`` extra (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import backtest_bench  # noqa: E402
import decision_bench  # noqa: E402
import gate_bench  # noqa: E402
import memory_bench  # noqa: E402
import peers_bench  # noqa: E402
import pg_round_trips  # noqa: E402
import sse_bench  # noqa: E402
import stream_cost_bench  # noqa: E402
import tricks_bench  # noqa: E402


def _table(section: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for label, work in section["workloads"].items():
        lines += [
            f"**{label}** ({work['events']:,} events; ratio = paired speed-up over "
            f"{work['fastest_peer']}, above 1 is faster)",
            "",
            "| candidate | median | min-max | events/s | us/event | ratio |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for row in sorted(work["rows"], key=lambda r: r["median_s"]):
            ratio = row["ratio_vs_fastest_peer"]
            lines.append(
                f"| {row['candidate']} | {row['median_s']:.3f} s | "
                f"{row['min_s']:.3f}-{row['max_s']:.3f} | {row['events_per_s']:,.0f} | "
                f"{row['us_per_event']:.2f} | {f'{ratio:.2f}x' if ratio else '-'} |"
            )
        if work["excluded_wrong_events"]:
            lines.append("")
            lines.append(
                "Not timed, their events differ: " + ", ".join(work["excluded_wrong_events"])
            )
        lines.append("")
    conf = section["conformance"]
    names = list(conf)
    lines += ["**Conformance** (WHATWG rules peers get wrong)", ""]
    lines.append("| rule | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    for rule in next(iter(conf.values())):
        cells = ["yes" if conf[n][rule] else "**no**" for n in names]
        lines.append(f"| {rule} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def _decision_table(section: dict[str, Any]) -> list[str]:
    lines = [
        f"One `send_email` call: {section['arguments_bytes']:,} bytes of arguments in "
        f"{section['deltas']} deltas; {section['calls_per_round']} calls per round, "
        f"{section['rounds']} rounds; ratio = paired speed-up over the first row of each group.",
        "",
    ]
    for label, rows in section["groups"].items():
        lines += [
            f"**{label}**",
            "",
            "| candidate | median per call | min-max | ratio |",
            "|---|---:|---:|---:|",
        ]
        for row in rows:
            lines.append(
                f"| {row['candidate']} | {row['median_us']:,.1f} us | "
                f"{row['min_us']:,.1f}-{row['max_us']:,.1f} | {row['ratio_vs_reference']:.2f}x |"
            )
        lines.append("")
    for label, table in section["semantics"].items():
        names = list(table)
        cases = list(next(iter(table.values())))
        title = {
            "parse": "strict parsing",
            "validate": "validation verdicts",
            "canonical_bytes": "canonical JSON bytes",
        }[label]
        lines += [f"**Semantics: {title}**", ""]
        lines.append("| case | " + " | ".join(names) + " |")
        lines.append("|---|" + "---|" * len(names))
        for case in cases:
            cells = [table[n][case] for n in names]
            first = cells[0]
            lines.append(
                f"| {case} | " + " | ".join(c if c == first else f"**{c}**" for c in cells) + " |"
            )
        lines.append("")
    return lines


def _sse_extra(section: dict[str, Any]) -> list[str]:
    dp = section["decode_and_parse"]
    lines = [
        f"**SSE decode + one JSON decode per event** (random cuts, LF; {dp['events']:,} events; "
        "CPU time)",
        "",
        "| pipeline | CPU per event | min-max |",
        "|---|---:|---:|",
    ]
    for row in dp["rows"]:
        lines.append(
            f"| {row['candidate']} | {row['cpu_us_per_event']:.2f} us | "
            f"{row['min_us']:.2f}-{row['max_us']:.2f} |"
        )
    big = section["big_event"]
    mem = section["memory"]
    lines += [
        "",
        f"**One big event in 1 KiB reads**: 1 MiB {big['1 MiB_s'] * 1e3:.1f} ms, "
        f"4 MiB {big['4 MiB_s'] * 1e3:.1f} ms (ratio {big['ratio']:.2f}).",
        "",
        f"**Decoder heap**: peak {mem['peak_extra_heap_bytes'] / 1024:,.0f} KiB above the "
        "start while decoding the whole stream in 64 KiB reads.",
        "",
    ]
    return lines


def _memory_table(section: dict[str, Any]) -> list[str]:
    return [
        f"**Accumulating {section['calls']:,} parallel calls** ({section['events']:,} events, "
        f"{section['deltas_per_call']} deltas per call, {section['argument_bytes']:,} bytes "
        f"of arguments in all): peak heap {section['peak_extra_heap_bytes'] / 1024:,.0f} KiB, "
        f"{section['peak_per_call_bytes']:,.0f} bytes per call, "
        f"{section['peak_over_argument_bytes']:.1f}x the argument text.",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 MB streams, fewer rounds")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument(
        "--only",
        choices=["sse", "decision", "memory", "gate", "pg_round_trips", "tricks", "peers",
                 "stream", "backtest"],
        action="append",
        default=None,
    )
    args = parser.parse_args()
    only = set(args.only or ["sse", "decision", "memory", "gate", "pg_round_trips", "tricks",
                             "peers", "stream", "backtest"])

    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "quick": args.quick,
    }
    verdicts: list[tuple[str, bool, str]] = []
    md: list[str] = []
    if "sse" in only:
        sse = sse_bench.run_section(args.quick)
        report["sse"] = sse
        verdicts += sse_bench.targets(sse)
        md += [
            f"### 1. SSE decoding ({sse['stream_bytes'] // (1024 * 1024)} MiB stream, "
            f"{sse['rounds']} rounds)",
            "",
            *_table(sse),
            *_sse_extra(sse),
        ]
    if "decision" in only:
        decision = decision_bench.run_section(args.quick)
        report["decision"] = decision
        verdicts += decision_bench.targets(decision)
        md += ["### 2. The decision path of one call", "", *_decision_table(decision)]
    if "gate" in only:
        gate = gate_bench.run_section(args.quick)
        report["gate"] = gate
        verdicts += gate_bench.targets(gate)
        md += ["### 3. The ledger and the gate", "", *gate_bench.markdown(gate)]
    if "memory" in only:
        memory = memory_bench.run_section(args.quick)
        report["memory"] = memory
        md += ["### 4. Memory", "", *_memory_table(memory)]
    if "tricks" in only:
        tricks = tricks_bench.run_section(args.quick)
        report["tricks"] = tricks
        md += ["### 5. What each shortcut buys", "", *tricks_bench.markdown(tricks)]
    if "peers" in only:
        peers = peers_bench.run_section(args.quick)
        report["peers"] = peers
        verdicts += peers_bench.targets(peers)
        md += ["### 6. Beside the durable-execution peers", "", *peers_bench.markdown(peers)]
    if "stream" in only:
        stream = stream_cost_bench.run_section(args.quick)
        report["stream"] = stream
        verdicts += stream_cost_bench.targets(stream)
        md += [
            "### 7. CPU per KB of arguments, streamed vs handed in",
            "",
            *stream_cost_bench.markdown(stream),
        ]
    if "pg_round_trips" in only:
        trips = pg_round_trips.run_section(args.quick)
        report["pg_round_trips"] = trips
        verdicts += pg_round_trips.targets(trips)
        md += ["### 8. PostgreSQL round trips per call", "", *pg_round_trips.markdown(trips)]
    if "backtest" in only:
        tested = backtest_bench.run_section(args.quick)
        report["backtest"] = tested
        verdicts += backtest_bench.targets(tested)
        md += ["### 9. Backtesting a draft policy", "", *backtest_bench.markdown(tested)]
    report["targets"] = [{"target": t, "met": met, "measured": m} for t, met, m in verdicts]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(report, indent=2) + "\n")
    command = "python tests/benchmarks/run.py" + (" --quick" if args.quick else "")
    command += "".join(f" --only {name}" for name in args.only or [])
    head = [
        f"Made by `{command}` on {report['when']} (Python {report['python']}, "
        f"{report['machine']}, {report['cpus']} CPUs; every figure a median over rounds, "
        "every ratio a paired one).",
        "",
        "**Targets**",
        "",
        "| target | measured | verdict |",
        "|---|---:|---|",
        *[f"| {t} | {m} | {'met' if met else '**not met**'} |" for t, met, m in verdicts],
        "",
    ]
    (args.out / "latest.md").write_text("\n".join(head + md))
    print("\n".join(head + md))


if __name__ == "__main__":
    main()
