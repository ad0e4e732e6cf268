"""A worker that replays one recorded stream into many tasks (run as a script).

Usage: replay_worker.py DB_URL FILE PROVIDER GO_FILE TASK...
Waits for GO_FILE so that racing workers start together, then prints one JSON
line per outcome.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from agent_tools import tools

from agent_gate import Gate
from agent_gate.sse import SSEDecoder


def main() -> None:
    url, file, provider, go, *tasks = sys.argv[1:]
    data = Path(file).read_bytes()
    with Gate(tools, url) as gate:
        deadline = time.monotonic() + 60
        while not Path(go).exists():
            if time.monotonic() > deadline:
                sys.exit("go file never appeared")
            time.sleep(0.005)
        for task in tasks:
            decoder = SSEDecoder()
            events = [*decoder.feed(data)]
            decoder.end()
            result = gate.run(events, task_id=task, provider=provider)
            for o in result.outcomes:
                print(json.dumps({"task": task, **o.to_dict()}))


if __name__ == "__main__":
    main()
