"""A worker that makes one call of a transactional tool (run as a script).

Usage: txn_worker.py DB_URL TASK CALL_ID AMOUNT

The tool ``credit`` inserts a row into ``engine_credits`` through the ledger's own
transaction (``current_transaction()``). ``$AG_HANG`` stops it for a SIGKILL:
``before-commit`` inside the tool, after its insert; ``after-commit`` once the gate
returned (the outcome and the insert committed). Prints the outcome as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/

from sqlalchemy import text

from agent_gate import Gate, ToolRegistry
from agent_gate.gate.transactional import current_transaction
from support.engine_tools import hang_at

tools = ToolRegistry()


@tools.tool(schema={"type": "object", "properties": {"amount": {"type": "integer"}},
                    "required": ["amount"]}, effect="write", transactional=True)
def credit(amount: int) -> dict[str, Any]:
    conn = current_transaction()
    conn.execute(text("INSERT INTO engine_credits (amount) VALUES (:a)"), {"a": amount})
    hang_at("before-commit")
    return {"credited": amount}


def main() -> None:
    url, task, call_id, amount = sys.argv[1:5]
    with Gate(tools, url) as gate:
        outcome = gate.execute(task, {"call_id": call_id, "name": "credit",
                                      "arguments": {"amount": int(amount)}})
        hang_at("after-commit")
    print(json.dumps(outcome.to_dict()))


if __name__ == "__main__":
    main()
