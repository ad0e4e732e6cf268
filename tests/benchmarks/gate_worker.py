"""One worker process of section 3: execute calls through the gate, log each run.

    python gate_worker.py URL TASK FIRST COUNT RUN_LOG GO_FILE

Says it is ready (GO_FILE.PID.ready), waits for GO_FILE to exist (so that all
workers start together), executes calls
``call-FIRST`` .. ``call-(FIRST+COUNT-1)`` of task TASK (after one unlogged warm-up
call) with a no-op tool that
appends its call id to RUN_LOG (one ``write`` with O_APPEND per run, so lines
from several processes never mix), and prints a JSON line with its wall time.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from agent_gate import Gate, ToolRegistry


def main() -> None:
    url, task, first, count, log, go = sys.argv[1:7]
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    tools = ToolRegistry()

    def noop(n: int) -> dict[str, Any]:
        os.write(fd, f"{n}\n".encode())
        return {"ok": True}

    def warm() -> dict[str, Any]:
        return {"ok": True}

    tools.register(noop, schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    tools.register(warm, schema={"type": "object"})
    with Gate(tools, url) as gate:
        # One unlogged call first: the task's row, the pooled connection and the
        # prepared statements exist before the timed calls (and the counted round trips).
        gate.execute(task, {"call_id": f"warm-{os.getpid()}", "name": "warm", "arguments": {}})
        Path(f"{go}.{os.getpid()}.ready").touch()
        while not Path(go).exists():
            time.sleep(0.005)
        start = time.perf_counter()
        for n in range(int(first), int(first) + int(count)):
            gate.execute(task, {"call_id": f"call-{n}", "name": "noop", "arguments": {"n": n}})
        elapsed = time.perf_counter() - start
    os.close(fd)
    print(json.dumps({"seconds": elapsed, "calls": int(count)}))


if __name__ == "__main__":
    main()
