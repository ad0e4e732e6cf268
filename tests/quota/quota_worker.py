"""A worker process that executes refunds on one task once a start file appears.

Usage: quota_worker.py DB_URL POLICY GO_FILE TASK PREFIX COUNT AMOUNT
Prints one JSON line per outcome.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "operator"))

from support_tools import tools

from agent_gate import Gate


def main() -> None:
    url, policy, go, task, prefix, count, amount = sys.argv[1:]
    with Gate(tools, url, policy=policy) as gate:
        deadline = time.monotonic() + 30
        while not Path(go).exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        for i in range(int(count)):
            outcome = gate.execute(task, {
                "call_id": f"{prefix}-{i}", "name": "refund",
                "arguments": {"order_id": f"ORD-{i:06d}", "amount": float(amount)},
            })
            print(json.dumps(outcome.to_dict()), flush=True)


if __name__ == "__main__":
    main()
