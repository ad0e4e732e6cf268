"""The measured process of ``seam_cost_bench`` and ``seam_pair_bench``: calls through
``Gate.execute`` of one checkout.

    python seam_cost_worker.py count URL CALLS WARM   # under callgrind, in marked parts
    python seam_cost_worker.py serve URL              # timed batches asked on stdin

Run with the interpreter of the checkout being measured: it imports nothing but
``agent_gate`` (and the standard library), so one file measures any checkout whose
public API has ``Gate``, ``ToolRegistry`` and ``Gate.execute``.

``count`` runs under ``valgrind --tool=callgrind --dump-before=os_getpgrp``. Each
``os.getpgrp()`` is a marker: callgrind writes the counts since the previous marker
to a file of their own and starts again from zero, so the parts come out apart in
one process, exactly, whatever else the machine runs:

0. start-up: imports, the ledger opened (created or migrated), then ``WARM`` new
   calls of each tool and ``WARM`` replays, so that caches, prepared statements,
   pooled connections and the task's row exist before anything is counted;
1. ``CALLS`` new calls of a read tool (``effect="read"``, ``idempotency="natural"``);
2. ``CALLS`` new calls of a write tool (the defaults, as ``gate_bench``'s no-op);
3. ``CALLS`` replays of part 1's calls (already finished: answered from the ledger).

``serve`` warms up the same way, then answers each stdin line ``PATH COUNT`` (a
path of ``PATHS``) with one JSON line: the batch's wall and user-mode CPU seconds,
measured in this process (the cyclic GC collected before and off during the batch,
as ``harness.paired`` does).

Both check what a user would: every new call ran its tool once and returned its
result, every replay returned the stored result without running the tool.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time
from typing import Any

import agent_gate
from agent_gate import Gate, ToolRegistry

TASK = "seam-bench"
PATHS = ("read", "write", "replay")
TOOLS = {"read": "lookup", "write": "record"}


class Calls:
    """New calls and replays on one gate, numbered so that no call id repeats."""

    def __init__(self, url: str) -> None:
        self.ran: list[int] = []
        self.failures: list[str] = []
        self.done: list[int] = []  # read calls finished, the ones a replay asks again
        self.next = 0
        self.replayed = 0
        tools = ToolRegistry()

        def lookup(n: int) -> dict[str, Any]:
            self.ran.append(n)
            return {"n": n}

        def record(n: int) -> dict[str, Any]:
            self.ran.append(n)
            return {"n": n}

        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        tools.register(lookup, schema=schema, effect="read", idempotency="natural")
        tools.register(record, schema=schema)
        sqlite = url.startswith("sqlite")
        self.gate = (Gate(tools, url, create=True) if sqlite
                     else Gate(tools, url, auto_upgrade=True))

    def run(self, path: str, count: int) -> None:
        if path == "replay":
            self._replay(count)
            return
        tool = TOOLS[path]
        for n in range(self.next, self.next + count):
            out = self.gate.execute(TASK, {"call_id": f"c{n}", "name": tool,
                                           "arguments": {"n": n}})
            if out.replayed or out.result != {"n": n}:
                self.failures.append(f"c{n}: {out.state} replayed={out.replayed}")
            if path == "read":
                self.done.append(n)
        self.next += count

    def _replay(self, count: int) -> None:
        """Replays the oldest finished read calls not replayed yet (each once, so a
        replay's cost never depends on how often the same call was asked)."""
        todo = self.done[self.replayed:self.replayed + count]
        if len(todo) < count:
            raise SystemExit(f"{count} replays asked, {len(todo)} read calls left to replay")
        self.replayed += count
        for n in todo:
            out = self.gate.execute(TASK, {"call_id": f"c{n}", "name": "lookup",
                                           "arguments": {"n": n}})
            if not out.replayed or out.result != {"n": n}:
                self.failures.append(f"replay c{n}: {out.state} replayed={out.replayed}")

    def warm(self, count: int) -> None:
        for path in PATHS:
            self.run(path, count)

    def check_runs(self) -> None:
        if len(self.ran) != self.next or len(set(self.ran)) != self.next:
            self.failures.append(f"tool runs {len(self.ran)} (distinct {len(set(self.ran))}), "
                                 f"expected {self.next}")


def _marker() -> None:
    """The C function ``os_getpgrp`` is callgrind's ``--dump-before`` trigger."""
    os.getpgrp()


def count(url: str, calls: int, warm: int) -> None:
    work = Calls(url)
    with work.gate:
        work.warm(warm)
        _marker()
        for path in PATHS:
            work.run(path, calls)
            _marker()
    work.check_runs()
    print(json.dumps({"calls": calls, "warm": warm, "tool_runs": len(work.ran),
                      "failures": work.failures, "agent_gate": agent_gate.__file__}))


def serve(url: str) -> None:
    work = Calls(url)
    with work.gate:
        work.warm(20)
        print(json.dumps({"ready": True, "agent_gate": agent_gate.__file__}), flush=True)
        for line in sys.stdin:
            path, n = line.split()
            gc.collect()
            gc.disable()
            try:
                wall, user = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
                work.run(path, int(n))
                after = resource.getrusage(resource.RUSAGE_SELF)
                wall = time.perf_counter() - wall
            finally:
                gc.enable()
            print(json.dumps({"wall": wall, "user": after.ru_utime - user.ru_utime,
                              "failures": work.failures[-3:]}), flush=True)
    work.check_runs()
    print(json.dumps({"done": True, "failures": work.failures}), flush=True)


def main() -> None:
    if sys.argv[1] == "count":
        count(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        serve(sys.argv[2])


if __name__ == "__main__":
    main()
