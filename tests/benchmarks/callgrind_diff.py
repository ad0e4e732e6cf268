"""Where two callgrind dumps differ: each function's instructions per call, side by side.

    python tests/benchmarks/callgrind_diff.py BEFORE_DUMP AFTER_DUMP --calls 100 [--top 20]

Reads each dump through ``callgrind_annotate --threshold=100`` (every function, self
cost) and prints the functions whose instructions per call moved most, largest
absolute difference first. Meant for ``seam_cost_bench``'s kept parts (say
``/tmp/seam_cost/before-sqlite-0/callgrind.out.1`` and the same of ``after``: part
1 is the read path). A part cut by a marker in mid-program also lists the frames
that were open when it was cut, each with (nearly) the part's whole cost; those are
left out (they are the same in both and say nothing about where the work went).

Callgrind sees C functions: agent-gate's Python shows up as the interpreter's
(``_PyEval_EvalFrameDefault``, dict lookups, allocation), SQLite's work as
``sqlite3VdbeExec`` and friends, libpq's as ``PQ*``, so a difference says which
layer grew; which Python code did is for a profiler that counts Python calls.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

LINE = re.compile(r"^\s*([\d,]+)\s+\([\s\d.]+%\)\s+(.*)$")


def self_costs(dump: Path) -> tuple[int, dict[str, int]]:
    """(total, {function: self instructions}) of one dump."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", str(dump)],
                          capture_output=True, text=True, check=True).stdout
    total = 0
    costs: dict[str, int] = {}
    for line in text.splitlines():
        found = LINE.match(line)
        if not found:
            continue
        ir, name = int(found.group(1).replace(",", "")), found.group(2)
        if name.startswith("PROGRAM TOTALS"):
            total = ir
            continue
        name = re.sub(r"^/tmp/python-build[^/]*/Python-[\d.]+/(\./)?", "", name)
        name = re.sub(r"'\d+( |$)", r"\1", name)  # one row per function, not per recursion depth
        # The same library in each checkout's venv is one row: named from site-packages on.
        name = re.sub(r"\[[^\]]*site-packages/", "[", name)
        costs[name] = costs.get(name, 0) + ir
    # Frames open when the part was cut carry the part's whole cost (all but what
    # other threads ran): not self costs. No function's own work comes near half.
    return total, {k: v for k, v in costs.items() if v < total / 2}


def diff(before: Path, after: Path, calls: int, top: int) -> list[str]:
    total_a, a = self_costs(before)
    total_b, b = self_costs(after)
    rows = sorted(set(a) | set(b), key=lambda k: -abs(b.get(k, 0) - a.get(k, 0)))
    lines = [
        f"per call: {total_a / calls:,.0f} -> {total_b / calls:,.0f} instructions "
        f"({(total_b - total_a) / calls:+,.0f}, {total_b / total_a - 1:+.1%})",
        "",
        "| function | before | after | difference |",
        "|---|---:|---:|---:|",
    ]
    for name in rows[:top]:
        x, y = a.get(name, 0) / calls, b.get(name, 0) / calls
        lines.append(f"| `{name[:110]}` | {x:,.0f} | {y:,.0f} | {y - x:+,.0f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--calls", type=int, required=True, help="calls in each part")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    print("\n".join(diff(args.before, args.after, args.calls, args.top)))


if __name__ == "__main__":
    main()
