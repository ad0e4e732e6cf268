"""Run the benchmarks and write results/latest.json and results/latest.md.

    python tests/benchmarks/run.py [--quick]

Not collected by pytest: benchmarks are measurements, never assertions. Peers
come from the ``bench`` extra (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import sse_bench  # noqa: E402


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 MB streams, 3 rounds")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()

    sse = sse_bench.run_section(args.quick)
    verdicts = sse_bench.targets(sse)
    report = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "quick": args.quick,
        "sse": sse,
        "targets": [{"target": t, "met": met, "measured": m} for t, met, m in verdicts],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(report, indent=2) + "\n")
    command = "python tests/benchmarks/run.py" + (" --quick" if args.quick else "")
    md = [
        f"Made by `{command}` on {report['when']} (Python {report['python']}, "
        f"{report['machine']}, {sse['stream_bytes'] // (1024 * 1024)} MiB stream, "
        f"{sse['rounds']} rounds, medians).",
        "",
        *_table(sse),
        "**Targets**",
        "",
        "| target | measured | verdict |",
        "|---|---:|---|",
        *[f"| {t} | {m} | {'met' if met else '**not met**'} |" for t, met, m in verdicts],
        "",
    ]
    (args.out / "latest.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
