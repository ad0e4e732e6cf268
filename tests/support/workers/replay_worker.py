"""A worker that replays one recorded stream into many tasks (run as a script).

Usage: replay_worker.py DB_URL FILE PROVIDER GO_FILE TASK...
Says it is ready, then waits for GO_FILE, so that racing workers start together;
prints one JSON line per outcome.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # support, for agent_tools
sys.path.append(str(Path(__file__).resolve().parents[2]))  # tests/, for waiting

from agent_tools import tools
from waiting import await_start

from agent_gate import Gate
from agent_gate.sse import SSEDecoder


def main() -> None:
    url, file, provider, go, *tasks = sys.argv[1:]
    data = Path(file).read_bytes()
    with Gate(tools, url) as gate:
        await_start(go)
        for task in tasks:
            decoder = SSEDecoder()
            events = [*decoder.feed(data)]
            decoder.end()
            result = gate.run(events, task_id=task, provider=provider)
            for o in result.outcomes:
                print(json.dumps({"task": task, **o.to_dict()}))


if __name__ == "__main__":
    main()
