"""Time per call through ``Gate.execute`` for two checkouts, paired round by round.

    python tests/benchmarks/seam_pair_bench.py \\
        --checkout before=/work/wt/cpubench-before --checkout after=. [--rounds 15]

Two checkouts cannot share a process (both are ``agent_gate``), so ``harness.paired``
cannot take turns between them. This does the same across processes: one
``seam_cost_worker.py serve`` per checkout (its own interpreter, ``CHECKOUT/.venv``),
both started and warmed up before anything is timed, then every round each path's
batch runs in every worker, one after the other in an order rotated each round; a
worker times its own batch (wall, and its user-mode CPU: fsync is the kernel's). A
ratio is the median over rounds of the two workers' figures in that round, which saw
the same moment of the machine. Paths and backends as in ``seam_cost_bench``.

On this shared machine the instruction counts of ``seam_cost_bench`` are the figure
to compare code by; this says what the same change looks like in time, with the
load beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from seam_cost_bench import PATHS, WORKER, _commit, _fresh_database  # noqa: E402


class Worker:
    """One checkout's serving worker, asked for batches over its stdin."""

    def __init__(self, python: Path, url: str) -> None:
        self.proc = subprocess.Popen([str(python), str(WORKER), "serve", url],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        imported = Path(self._answer()["agent_gate"])
        if not imported.is_relative_to(python.parent.parent.parent):
            raise RuntimeError(f"{python} imported agent_gate from {imported}")

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"a worker exited ({self.proc.wait()})")
        return json.loads(line)  # type: ignore[no-any-return]

    def batch(self, path: str, calls: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{path} {calls}\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> list[str]:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        done = self._answer()
        self.proc.wait(timeout=60)
        return done["failures"]  # type: ignore[no-any-return]


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _paired(workers: dict[str, Worker], rounds: int, calls: int) -> dict[str, Any]:
    labels = list(workers)
    seen: dict[str, dict[str, dict[str, list[float]]]] = {
        path: {label: {"wall": [], "user": []} for label in labels} for path in PATHS}
    for round_no in range(rounds):
        shift = round_no % len(labels)
        for path in PATHS:
            for label in labels[shift:] + labels[:shift]:
                got = workers[label].batch(path, calls)
                seen[path][label]["wall"].append(got["wall"] / calls)
                seen[path][label]["user"].append(got["user"] / calls)
    first, last = labels[0], labels[-1]
    out: dict[str, Any] = {}
    for path, per in seen.items():
        row: dict[str, Any] = {
            label: {f"{clock}_us": statistics.median(v) * 1e6 for clock, v in series.items()}
            for label, series in per.items()}
        for clock in ("wall", "user"):
            pairs = zip(per[last][clock], per[first][clock], strict=True)
            row[f"{clock}_ratio"] = statistics.median(a / b for a, b in pairs if b > 0)
        out[path] = row
    return out


def run(checkouts: dict[str, Path], backends: list[str], rounds: int,
        calls: int) -> dict[str, Any]:
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(), "rounds": rounds, "calls": calls,
        "checkouts": {label: {"path": str(p), "commit": _commit(p)}
                      for label, p in checkouts.items()},
        "backends": {},
    }
    for backend in backends:
        with tempfile.TemporaryDirectory() as tmp:
            workers = {}
            for label, checkout in checkouts.items():
                url = (f"sqlite:///{tmp}/{label}.db" if backend == "sqlite"
                       else _fresh_database(f"pair_{label}"))
                workers[label] = Worker(checkout / ".venv" / "bin" / "python", url)
            load_before = _load()
            paths = _paired(workers, rounds, calls)
            failures = {label: w.close() for label, w in workers.items()}
        report["backends"][backend] = {"paths": paths, "load": [load_before, _load()],
                                       "failures": failures}
        print(json.dumps({backend: report["backends"][backend]}), flush=True)
    return report


def markdown(report: dict[str, Any]) -> list[str]:
    labels = list(report["checkouts"])
    first, last = labels[0], labels[-1]
    lines = [
        f"Made by `python tests/benchmarks/seam_pair_bench.py` on {report['when']} "
        f"({report['cpus']} CPUs): {report['rounds']} rounds of {report['calls']} calls "
        "per path, the checkouts taking turns; medians per call, ratios paired by round.",
        "",
        "| backend | path | " + " | ".join(f"{lb} wall / user CPU" for lb in labels)
        + f" | {last} / {first}: wall | user CPU | load (1, 5, 15 min) |",
        "|---|---|" + "---:|" * (len(labels) + 3),
    ]
    for backend, got in report["backends"].items():
        for path, row in got["paths"].items():
            cells = [f"{row[lb]['wall_us']:,.0f} / {row[lb]['user_us']:,.0f} us" for lb in labels]
            lines.append(
                f"| {backend} | {path} | " + " | ".join(cells)
                + f" | {row['wall_ratio']:.3f} | {row['user_ratio']:.3f} | "
                + f"{got['load'][0]} -> {got['load'][1]} |")
        bad = {lb: f for lb, f in got["failures"].items() if f}
        if bad:
            lines.append(f"\n**{backend}: calls misbehaved** (not figures): {bad}\n")
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", action="append", required=True, metavar="LABEL=PATH",
                        help="a checkout with its own .venv; the first is the reference")
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgres"])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    checkouts = {}
    for spec in args.checkout:
        label, _, path = spec.partition("=")
        checkouts[label] = Path(path).resolve()
    report = run(checkouts, args.backend or ["sqlite", "postgres"], args.rounds, args.calls)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "seam_pair.json").write_text(json.dumps(report, indent=2) + "\n")
    md = markdown(report)
    (args.out / "seam_pair.md").write_text("\n".join(md))
    print("\n".join(md))
    if any(f for got in report["backends"].values() for f in got["failures"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
