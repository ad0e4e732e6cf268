"""A worker process that resumes tasks once a start file appears (run as a script).

Usage: resume_worker.py DB_URL POLICY GO_FILE TASK...
Prints one JSON line per outcome.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cli"))
sys.path.append(str(Path(__file__).resolve().parents[2]))  # tests/, for waiting

from support_tools import tools
from waiting import await_start

from agent_gate import Gate


def main() -> None:
    url, policy, go, *tasks = sys.argv[1:]
    with Gate(tools, url, policy=policy) as gate:
        await_start(go)
        for task in tasks:
            for outcome in gate.resume(task):
                print(json.dumps({"task": task, **outcome.to_dict()}), flush=True)


if __name__ == "__main__":
    main()
