"""A DBOS application whose workflow makes one gated transactional call through a DBOS
datasource on the ledger's own PostgreSQL database (run as a script).

Usage: dbos_txn_worker.py start|recover SYSTEM_DB LEDGER WORKFLOW_ID AMOUNT SYS_SCHEMA DS_SCHEMA

The tool ``credit`` inserts a row into ``engine_credits`` through the transaction it
is given (``current_transaction()``): DBOS's datasource transaction, which also holds
the ledger's outcome and DBOS's record of the step. ``$AG_HANG`` stops it for a
SIGKILL: ``before-call``; ``before-commit`` inside the tool, after its insert;
``before-ds-commit`` once the ledger's outcome and DBOS's record are written, right
before that transaction commits; ``after-ds-commit`` right after it committed,
before DBOS records the step in its system database; ``after-commit`` once the step
returned to the workflow. Prints the workflow's result as one JSON line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/

from dbos import DBOS, SetWorkflowID, SQLAlchemyDatasource
from sqlalchemy import event, text

from agent_gate import Gate, ToolRegistry
from agent_gate.gate.transactional import current_transaction
from agent_gate.integrations.dbos import GatedSteps
from support.engine_tools import hang_at

tools = ToolRegistry()


@tools.tool(schema={"type": "object", "properties": {"amount": {"type": "integer"}},
                    "required": ["amount"]}, effect="write", transactional=True)
def credit(amount: int) -> dict[str, Any]:
    current_transaction().execute(
        text("INSERT INTO engine_credits (amount) VALUES (:a)"), {"a": amount})
    hang_at("before-commit")
    return {"credited": amount}


def main() -> None:
    mode, system_db, ledger, workflow_id, amount, sys_schema, ds_schema = sys.argv[1:8]
    config = {"name": "agent-gate-dbos-txn-test", "system_database_url": system_db,
              "dbos_system_schema": sys_schema, "log_level": "WARNING"}
    DBOS(config=config)  # type: ignore[arg-type]
    datasource = SQLAlchemyDatasource.create(ledger, schema=ds_schema)
    event.listen(datasource.sessionmaker, "before_commit",
                 lambda _session: hang_at("before-ds-commit"))
    event.listen(datasource.sessionmaker, "after_commit",
                 lambda _session: hang_at("after-ds-commit"))
    gate = Gate(tools, ledger)
    steps = GatedSteps(gate, datasource=datasource)

    @DBOS.workflow(name="credit")
    def credit_flow(amount: int) -> dict[str, object]:
        hang_at("before-call")
        outcome = steps.execute({"name": "credit", "arguments": {"amount": amount}})
        hang_at("after-commit")
        return {"state": outcome.state.value, "call_id": outcome.call_id,
                "result": outcome.result, "replayed": outcome.replayed,
                "attempt": outcome.attempt}

    DBOS.launch()
    try:
        if mode == "start":
            with SetWorkflowID(workflow_id):
                handle = DBOS.start_workflow(credit_flow, int(amount))
        else:
            handle = DBOS.retrieve_workflow(workflow_id)
        print(json.dumps(handle.get_result()), flush=True)
    finally:
        DBOS.destroy()
        gate.close()


if __name__ == "__main__":
    main()
