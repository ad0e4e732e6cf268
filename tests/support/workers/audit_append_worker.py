"""A worker process for test_many_writers: appends to its own task and to a shared one.

Usage: audit_append_worker.py URL NAME ROUNDS. Each round records a call in the
worker's own task (task_created and received in one transaction the first time,
received otherwise), allows it (one entry), and ends a response in the shared task
(one entry, competing with every other worker for that task's head).
"""

from __future__ import annotations

import sys

from agent_gate.ledger import Event, Ledger, NewCall


def main(url: str, name: str, rounds: int) -> None:
    with Ledger(url) as ledger:
        for i in range(rounds):
            call_id = f"{name}-{i}"
            rec, _ = ledger.record(NewCall(
                task_id=f"own-{name}", call_id=call_id, idem_key=f"call:{call_id}",
                tool="tool", effect="write", idempotency="none", args_hash="0" * 64,
                arguments={},
            ))
            ledger.transition(rec, Event.ALLOW, actor=name)
            ledger.record_terminal("shared", "completed", reason=call_id)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
