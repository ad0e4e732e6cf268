"""A worker process that executes refunds on one task once a start file appears.

Usage: quota_worker.py DB_URL POLICY GO_FILE TASK PREFIX COUNT AMOUNT
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
    url, policy, go, task, prefix, count, amount = sys.argv[1:]
    with Gate(tools, url, policy=policy) as gate:
        await_start(go)
        for i in range(int(count)):
            outcome = gate.execute(task, {
                "call_id": f"{prefix}-{i}", "name": "refund",
                "arguments": {"order_id": f"ORD-{i:06d}", "amount": float(amount)},
            })
            print(json.dumps(outcome.to_dict()), flush=True)


if __name__ == "__main__":
    main()
