"""A worker process that executes one call through the gate (run as a script).

Usage: gate_worker.py DB_URL TASK CALL_ID TOOL JSON_ARGUMENTS
Prints the outcome as JSON; the test may SIGKILL it while the tool runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # support, for agent_tools

from agent_tools import tools

from agent_gate import Gate


def main() -> None:
    url, task, call_id, tool, arguments = sys.argv[1:6]
    with Gate(tools, url) as gate:
        outcome = gate.execute(
            task, {"call_id": call_id, "name": tool, "arguments": json.loads(arguments)}
        )
    print(json.dumps(outcome.to_dict()))


if __name__ == "__main__":
    main()
