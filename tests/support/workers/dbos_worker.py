"""A DBOS application whose workflow makes one gated payment (run as a script).

Usage: dbos_worker.py start|recover SYSTEM_DB LEDGER WORKFLOW_ID TOOL AMOUNT [SCHEMA]

``start`` launches DBOS and starts workflow WORKFLOW_ID; ``recover`` launches DBOS,
which recovers the pending workflows a killed process left, and waits for that one.
Either prints the workflow's result as one JSON line. ``$AG_HANG`` stops it at a kill
point (``support.engine_tools``); ``$AG_OUTBOX`` is where the payment is written.
SCHEMA: the system database's schema on PostgreSQL (one per test).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/

from dbos import DBOS, SetWorkflowID

from agent_gate.integrations.dbos import CallInDoubt, GatedSteps
from support.engine_tools import HangingGate, hang_at, make_tools

POLICY = Path(__file__).resolve().parents[2] / "integrations" / "engines_policy.yaml"


def main() -> None:
    mode, system_db, ledger, workflow_id, tool, amount = sys.argv[1:7]
    schema = sys.argv[7] if len(sys.argv) > 7 else None
    gate = HangingGate(make_tools(), ledger, policy=POLICY)
    steps = GatedSteps(gate, poll_max=0.5)

    @DBOS.workflow(name="pay")
    def pay(to: str, amount: int) -> dict[str, object]:
        hang_at("before-call")
        try:
            outcome = steps.execute({"name": tool, "arguments": {"to": to, "amount": amount}})
        except CallInDoubt as exc:
            return {"in_doubt": exc.call_id, "task": exc.task_id}
        hang_at("after-step")
        return {"state": outcome.state.value, "call_id": outcome.call_id,
                "result": outcome.result, "replayed": outcome.replayed}

    config = {"name": "agent-gate-dbos-test", "system_database_url": system_db,
              "notification_listener_polling_interval_sec": 0.05, "log_level": "WARNING"}
    if schema:
        config["dbos_system_schema"] = schema
    DBOS(config=config)  # type: ignore[arg-type]
    DBOS.launch()
    try:
        if mode == "start":
            with SetWorkflowID(workflow_id):
                handle = DBOS.start_workflow(pay, "alice", int(amount))
            print(json.dumps({"status": "started"}), flush=True)
        else:
            handle = DBOS.retrieve_workflow(workflow_id)
        print(json.dumps(handle.get_result()), flush=True)
    finally:
        DBOS.destroy()
        gate.close()


if __name__ == "__main__":
    main()
