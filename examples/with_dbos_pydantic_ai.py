"""A pydantic-ai agent on DBOS (``DBOSAgent``) with its tools behind agent-gate.

``DBOSAgent`` runs the agent as a DBOS workflow and each model request as a step, so
a workflow recovered after a crash replays the model's answers, with the same tool
call ids. A tool cut by the crash runs again. ``GatedToolset`` (the ordinary adapter),
built per run by a toolset function so that its task is the workflow's id, puts each
call through the gate, keyed by that id and pydantic-ai's ``tool_call_id``: the
replayed call is answered from the ledger. Offline (a ``FunctionModel`` stands in for
the LLM; SQLite for DBOS and the ledger; ``pip install 'agent-gate[engines,pydantic-ai]'``):

1. a process runs the agent's workflow; the model asks for a payment of 40, the gate
   runs it (one line in the outbox), and the process is killed (SIGKILL) during the
   model's next request, before DBOS recorded it;
2. a new process launches DBOS, which recovers the workflow: the first request is
   replayed from DBOS's record, the payment call arrives again, and the gate answers
   it from the ledger; the agent finishes.

The outbox holds one payment. Run it: ``python examples/with_dbos_pydantic_ai.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, FunctionToolset, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

HERE = Path(__file__).resolve().parent
POLICY = HERE / "payments_policy.yaml"
WORKFLOW = "pai-pay-acme-1"


def pay(outbox: Path, to: str, amount: int) -> str:
    with outbox.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"to": to, "amount": amount}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return f"paid {amount} to {to}"


def cashier(crash: Path | None) -> FunctionModel:
    """Stands in for an LLM: asks for one payment, then reports what the tool said;
    with ``crash`` set, kills its own process when asked the second time."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns and crash is not None and crash.exists():
            crash.unlink()
            os.kill(os.getpid(), signal.SIGKILL)  # before DBOS records this request
        if returns:
            return ModelResponse(parts=[TextPart(f"tool said: {returns[-1].content}")])
        call = ToolCallPart("send_payment", {"to": "acme", "amount": 40},
                            tool_call_id="call-pay-acme")
        return ModelResponse(parts=[call])

    return FunctionModel(respond)


def worker(mode: str, work: Path, ledger: str) -> None:
    """One process of the application: start the workflow, or recover it."""
    from dbos import DBOS, SetWorkflowID
    from pydantic_ai.durable_exec.dbos import DBOSAgent

    from agent_gate import Gate, ToolRegistry
    from agent_gate.integrations.pydantic_ai import GatedToolset

    outbox = work / "outbox.jsonl"
    payments: FunctionToolset[Any] = FunctionToolset()

    @payments.tool_plain
    def send_payment(to: str, amount: int) -> str:
        """Pay a vendor from the company account."""
        return pay(outbox, to, amount)

    gate = Gate(ToolRegistry(), ledger, policy=POLICY)

    def gated(ctx: RunContext[None]) -> GatedToolset:
        # Built for each run, inside its workflow: the gate's task is the workflow.
        return GatedToolset(payments, gate, task_id=str(DBOS.workflow_id))

    agent = Agent(cashier(work / "crash" if mode == "start" else None), name="payer",
                  toolsets=[gated])
    durable = DBOSAgent(agent)  # registers the agent's run as a workflow, before launch

    DBOS(config={"name": "agent-gate-dbos-pydantic-ai", "log_level": "WARNING",
                 "system_database_url": f"sqlite:///{work / 'dbos.sqlite'}"})
    DBOS.launch()
    try:
        if mode == "start":
            with SetWorkflowID(WORKFLOW):  # the agent's run is this workflow
                output = durable.run_sync("pay acme 40").output
        else:  # launch() recovered the workflow the killed process left
            output = DBOS.retrieve_workflow(WORKFLOW).get_result().output
        print(json.dumps({"output": output}))
    finally:
        DBOS.destroy()
        gate.close()


def _seen(db: str) -> int:
    """How often the gate has seen a call arrive again, so far (``run_sync`` runs the
    agent in a child workflow of ``WORKFLOW``: that one is the gate's task)."""
    from agent_gate.ledger import Ledger

    with Ledger(db) as ledger:
        tasks = {rec.task_id for rec in ledger.calls(None)}
        return sum(1 for task in tasks for a in ledger.audit(task) if a.event == "seen_again")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="ledger URL (default: a temporary file)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="agent-gate-dbos-pai-"))
    db = args.db or f"sqlite:///{work / 'ledger.db'}"
    from agent_gate import Gate, ToolRegistry

    Gate(ToolRegistry(), db, create=True).close()  # a new ledger, once
    (work / "crash").touch()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = [sys.executable, str(Path(__file__).resolve()), "--worker"]
    first = subprocess.run([*child, "start", str(work), db], env=env,
                           capture_output=True, text=True, timeout=120)
    print("1. the first process died:", first.returncode == -signal.SIGKILL)
    seen_first = _seen(db)
    second = subprocess.run([*child, "recover", str(work), db], env=env,
                            capture_output=True, text=True, timeout=120)
    if second.returncode != 0:
        raise SystemExit(second.stderr)
    output = json.loads(second.stdout.splitlines()[-1])["output"]
    paid = [json.loads(line) for line in (work / "outbox.jsonl").read_text().splitlines()]
    with Gate(ToolRegistry(), db) as gate:
        (task,) = {rec.task_id for rec in gate.ledger.calls(None)}
        states = {o.call_id: o.state.value for o in gate.calls(task)}
        runs = sum(1 for a in gate.ledger.audit(task) if a.event == "claim")
    asked_again = _seen(db) > seen_first
    print(f"2. recovered: {output!r}; the payment call reached the gate again: {asked_again}; "
          f"it ran {runs} time(s); ledger: {states}; payments: {paid}")
    return {"first_status": first.returncode, "final": output, "task": task, "states": states,
            "runs": runs, "asked_again": asked_again, "paid": paid}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], Path(sys.argv[3]), sys.argv[4])
    else:
        main()
