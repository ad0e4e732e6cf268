"""Instructions per call through ``Gate.execute``, for two checkouts side by side.

    python tests/benchmarks/seam_cost_bench.py \\
        --checkout before=/work/wt/cpubench-before --checkout after=. [--repeats 2]

Why instructions: CPU time per call on this machine (2 cores, shared, load 5-20)
swings by more than any difference a refactor is asked to stay within, while
callgrind's instruction count is exact and the same from run to run whatever else
runs. Issue 31 asked for "CPU per call within noise of today, before and after"; an
instruction count has no noise to be within, so a difference it shows is the code's.

Each checkout is run with its own interpreter (``CHECKOUT/.venv/bin/python``: its
dependencies may differ, so install the same versions in both to compare the code
alone) under ``valgrind --tool=callgrind --dump-before=os_getpgrp`` on
``seam_cost_worker.py``, which marks its parts with ``os.getpgrp()``; callgrind
writes each part's counts to a file of their own, so start-up and warm-up are
cut away exactly, in one process. The parts, each ``--calls`` calls after a
warm-up of ``--warm`` of each kind:

* ``read``: a new call of a read tool (recorded, decided and claimed in one commit,
  its outcome in a second);
* ``write``: the same with a write tool (the default options, as ``gate_bench``);
* ``replay``: a call already finished, executed again (answered from the ledger).

Backends: a fresh SQLite file, and a fresh PostgreSQL database
(``AGENT_GATE_BENCH_POSTGRES``, a libpq conninfo without ``dbname``; default
``host=127.0.0.1 port=5432 user=postgres``); on PostgreSQL only the client's
instructions are counted (the server is another process). Not collected by pytest:
a measurement, never an assertion; but a run whose calls misbehave (a tool run
twice or never, a replay that ran) is reported as failed, not as a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKER = HERE / "seam_cost_worker.py"
PATHS = ("read", "write", "replay")
"""The worker's counted parts, in the order its markers cut them (part 0 is start-up)."""
TRIGGER = "os_getpgrp"
PREPARE = (
    "import sys; from agent_gate import Gate, ToolRegistry; url = sys.argv[1]; "
    "Gate(ToolRegistry(), url, **({'create': True} if url.startswith('sqlite') "
    "else {'auto_upgrade': True})).close()"
)
"""Creates (SQLite) or migrates (PostgreSQL) a fresh ledger, with the checkout's code."""


def _commit(checkout: Path) -> str:
    out = subprocess.run(["git", "-C", str(checkout), "log", "-1", "--format=%h %s"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()[:100]


def _postgres_base() -> str:
    return os.environ.get("AGENT_GATE_BENCH_POSTGRES", "host=127.0.0.1 port=5432 user=postgres")


def _fresh_database(label: str) -> str:
    """A new, empty database for one run (dropped first): the SQLAlchemy URL."""
    import psycopg

    name = f"ag_seam_{re.sub(r'[^a-z0-9_]', '_', label.lower())}"
    base = _postgres_base()
    with psycopg.connect(f"{base} dbname=postgres connect_timeout=3", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    info = psycopg.conninfo.conninfo_to_dict(base)
    host, port, user = info.get("host", "127.0.0.1"), info.get("port", "5432"), info["user"]
    return f"postgresql+psycopg://{user}@{host}:{port}/{name}"


def _totals(dump: Path) -> tuple[str, int]:
    """(trigger, instructions) of one callgrind dump."""
    text = dump.read_text()
    trigger = re.search(r"^desc: Trigger: (.*)$", text, re.M)
    totals = re.search(r"^totals: (\d+)", text, re.M)
    if trigger is None or totals is None:
        raise RuntimeError(f"{dump}: no trigger or totals line")
    return trigger.group(1), int(totals.group(1))


def measure(python: Path, url: str, calls: int, warm: int, keep: Path) -> dict[str, Any]:
    """One worker under callgrind: instructions of each part, and the worker's checks."""
    keep.mkdir(parents=True, exist_ok=True)
    for old in keep.glob("callgrind.out*"):
        old.unlink()
    # The ledger's schema is made before, outside callgrind: a third of a run's
    # instructions, none of them in a counted part.
    # -P: ``-c`` would put the current directory first on sys.path, and with it the
    # checkout this runs from instead of the one measured.
    subprocess.run([str(python), "-P", "-c", PREPARE, url], check=True, timeout=600)
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--dump-before={TRIGGER}",
         f"--callgrind-out-file={keep}/callgrind.out",
         str(python), str(WORKER), "count", url, str(calls), str(warm)],
        capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"},
        timeout=3600,
    )
    if out.returncode != 0:
        raise RuntimeError(f"worker failed ({out.returncode}): {out.stderr[-2000:]}")
    checks = json.loads(out.stdout.strip().splitlines()[-1])
    if not Path(checks["agent_gate"]).is_relative_to(python.parent.parent.parent):
        raise RuntimeError(f"{python} imported agent_gate from {checks['agent_gate']}")
    parts = sorted(keep.glob("callgrind.out.*"), key=lambda p: int(p.suffix[1:]))
    if len(parts) != 1 + len(PATHS):
        raise RuntimeError(f"{len(parts)} marked dumps in {keep}, expected {1 + len(PATHS)}")
    counted = [_totals(p) for p in parts]
    if any(TRIGGER not in trigger for trigger, _ in counted):
        raise RuntimeError(f"a dump in {keep} was not cut by the marker")
    return {
        "startup_instructions": counted[0][1],
        "instructions": {path: n for path, (_, n) in zip(PATHS, counted[1:], strict=True)},
        "per_call": {path: n / calls for path, (_, n) in zip(PATHS, counted[1:], strict=True)},
        "failures": checks["failures"],
        "tool_runs": checks["tool_runs"],
        "dumps": str(keep),
    }


def run(checkouts: dict[str, Path], backends: list[str], repeats: int, calls: int,
        warm: int, keep: Path, jobs: int = 1) -> dict[str, Any]:
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "valgrind": subprocess.run(["valgrind", "--version"], capture_output=True,
                                   text=True).stdout.strip(),
        "calls": calls,
        "warm": warm,
        "repeats": repeats,
        "checkouts": {label: {"path": str(p), "commit": _commit(p)}
                      for label, p in checkouts.items()},
        "runs": [],
    }
    def one(repeat: int, backend: str, label: str) -> dict[str, Any]:
        name = f"{label}-{backend}-{repeat}"
        with tempfile.TemporaryDirectory() as tmp:
            url = (f"sqlite:///{tmp}/ledger.db" if backend == "sqlite"
                   else _fresh_database(f"{label}_{repeat}"))
            got = measure(checkouts[label] / ".venv" / "bin" / "python", url, calls, warm,
                          keep / name)
        got.update(checkout=label, backend=backend, repeat=repeat)
        print(json.dumps({k: got[k] for k in ("checkout", "backend", "repeat",
                                              "per_call", "failures")}), flush=True)
        return got

    # Runs side by side change no count (each its own process, ledger and dumps).
    combos = [(r, b, lb) for r in range(repeats) for b in backends for lb in checkouts]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        report["runs"] = list(pool.map(lambda c: one(*c), combos))
    return report


def markdown(report: dict[str, Any]) -> list[str]:
    labels = list(report["checkouts"])
    first, last = labels[0], labels[-1]
    lines = [
        f"Made by `python tests/benchmarks/seam_cost_bench.py` on {report['when']} "
        f"(Python {report['python']}, {report['valgrind']}): instructions per call "
        f"(callgrind, exact), {report['calls']} calls per path after {report['warm']} "
        f"of each kind, {report['repeats']} runs of each; PostgreSQL: the client's only.",
        "",
        *[f"- {label}: `{c['commit']}`" for label, c in report["checkouts"].items()],
        "",
        "| backend | path | " + " | ".join(labels) + f" | {last} / {first} |",
        "|---|---|" + "---:|" * (len(labels) + 1),
    ]
    backends = list(dict.fromkeys(r["backend"] for r in report["runs"]))
    for backend in backends:
        for path in PATHS:
            cells = []
            means = {}
            for label in labels:
                runs = [r["per_call"][path] for r in report["runs"]
                        if r["checkout"] == label and r["backend"] == backend]
                means[label] = sum(runs) / len(runs)
                cells.append(" / ".join(f"{n / 1e6:.3f} M" for n in runs))
            ratio = means[last] / means[first]
            lines.append(f"| {backend} | {path} | " + " | ".join(cells) + f" | {ratio:.3f} |")
    failed = [r for r in report["runs"] if r["failures"]]
    lines += ["", "Each cell lists every run (repeatability); the ratio is of their means."]
    if failed:
        lines += ["", "**Runs whose calls misbehaved** (not figures): " + "; ".join(
            f"{r['checkout']} {r['backend']} #{r['repeat']}: {r['failures'][:3]}"
            for r in failed)]
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", action="append", required=True, metavar="LABEL=PATH",
                        help="a checkout with its own .venv; the first is the reference")
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgres"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--warm", type=int, default=20)
    parser.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()) / "seam_cost",
                        help="where each run's callgrind dumps stay (for callgrind_annotate)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--jobs", type=int, default=1, help="runs under callgrind at once")
    args = parser.parse_args()
    checkouts = {}
    for spec in args.checkout:
        label, _, path = spec.partition("=")
        checkouts[label] = Path(path).resolve()
    report = run(checkouts, args.backend or ["sqlite", "postgres"], args.repeats, args.calls,
                 args.warm, args.keep, args.jobs)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "seam_cost.json").write_text(json.dumps(report, indent=2) + "\n")
    md = markdown(report)
    (args.out / "seam_cost.md").write_text("\n".join(md))
    print("\n".join(md))
    if any(r["failures"] for r in report["runs"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
