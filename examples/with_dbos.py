"""A DBOS workflow whose payments are gated calls (``GatedSteps``), each a DBOS step.

The workflow pays acme 40 (the policy allows it: it runs at once) and globex 500
(the policy wants a person: the workflow suspends on ``DBOS.recv``). A person
approves it (here ``Gate.approve`` from another thread, as ``agent-gate approve`` or
the inbox would from anywhere) and wakes the workflow; it runs the payment once.
Starting the same workflow id again is answered from DBOS's records and pays
nothing. Offline, SQLite for DBOS and the ledger (``pip install 'agent-gate[engines]'``).

Run it: ``python examples/with_dbos.py [--db URL]``.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from dbos import DBOS, SetWorkflowID

from agent_gate import Gate, ToolRegistry
from agent_gate.integrations.dbos import GatedSteps, wake

POLICY = Path(__file__).resolve().parent / "payments_policy.yaml"
WORKFLOW = "pay-vendors-1"
PAID: list[tuple[str, int]] = []

tools = ToolRegistry()


@tools.tool(effect="write", idempotency="none")
def send_payment(to: str, amount: int) -> str:
    """Pay a vendor from the company account."""
    PAID.append((to, amount))
    return f"paid {amount} to {to}"


def approve_when_asked(gate: Gate, by: str) -> None:
    """A person, elsewhere: approves the payment once it waits, then wakes the workflow."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        waiting = gate.pending(WORKFLOW)
        if waiting:
            gate.approve(waiting[0].call_id, task_id=WORKFLOW, by=by)
            wake(WORKFLOW, waiting[0].call_id)
            return
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="ledger URL (default: a temporary file)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="agent-gate-dbos-"))
    db = args.db or f"sqlite:///{work / 'ledger.db'}"
    PAID.clear()
    gate = Gate(tools, db, policy=POLICY, create=True)
    steps = GatedSteps(gate, poll_max=30)

    @DBOS.workflow(name="pay_vendors")
    def pay_vendors() -> list[str]:
        small = steps.execute({"name": "send_payment", "arguments": {"to": "acme", "amount": 40}})
        large = steps.execute({"name": "send_payment",
                               "arguments": {"to": "globex", "amount": 500}})
        return [f"{o.call_id}: {o.state.value}" for o in (small, large)]

    DBOS(config={"name": "agent-gate-with-dbos", "log_level": "WARNING",
                 "system_database_url": f"sqlite:///{work / 'dbos.sqlite'}"})
    DBOS.launch()
    try:
        person = threading.Thread(target=approve_when_asked, args=(gate, "alice"))
        person.start()
        with SetWorkflowID(WORKFLOW):
            first = pay_vendors()
        person.join()
        print("1.", first, "| paid:", PAID)
        with SetWorkflowID(WORKFLOW):
            again = pay_vendors()
        print("2. the same workflow again:", again, "| paid:", PAID)
        states = {o.call_id: o.state.value for o in gate.calls(WORKFLOW)}
    finally:
        DBOS.destroy()
        gate.close()
    return {"db": db, "first": first, "again": again, "paid": list(PAID), "states": states}


if __name__ == "__main__":
    main()
