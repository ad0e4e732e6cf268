"""An OpenAI Agents SDK agent on DBOS (``DBOSRunner``) with its tools behind agent-gate.

``DBOSRunner`` makes each model call a DBOS step, so a workflow recovered after a
crash replays the model's answers, with the same call ids, instead of asking again.
Its tools, though, run again: a payment made before the crash is made a second time.
``gate_tools`` (the ordinary adapter) puts each invocation through the gate under the
workflow's id and the model's call id, so the replayed call is answered from the
ledger. This runs offline (a stand-in model, SQLite for DBOS and the ledger;
``pip install 'agent-gate[engines,openai-agents]' dbos-openai-agents``):

1. a process runs the workflow; the model asks for a payment of 40, the gate runs it
   (one line in the outbox), and the process is killed (SIGKILL) during the model's
   next call, before DBOS recorded it;
2. a new process launches DBOS, which recovers the workflow: the first model call is
   replayed from DBOS's record, the payment call arrives again with its call id, and
   the gate answers it from the ledger; the workflow finishes.

The outbox holds one payment. Run it: ``python examples/with_dbos_openai_agents.py``.
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

from agents import Agent, Model, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

HERE = Path(__file__).resolve().parent
POLICY = HERE / "payments_policy.yaml"
WORKFLOW = "pay-acme-1"
CALL_ID = "call-pay-acme"


def pay(outbox: Path, to: str, amount: int) -> str:
    with outbox.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"to": to, "amount": amount}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return f"paid {amount} to {to}"


class Cashier(ScriptedModel):
    """A stand-in model that answers from what it is shown (as a real one does): a
    payment while none was made, "done" once the payment's output is in the input.
    With ``crash`` set, it kills its own process when asked the second time."""

    def __init__(self, crash: Path | None) -> None:
        super().__init__()
        self.crash = crash

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        shown = kwargs.get("input", args[1] if len(args) > 1 else [])
        answered = isinstance(shown, list) and any(
            isinstance(item, dict) and item.get("type") == "function_call_output"
            for item in shown)
        if answered and self.crash is not None and self.crash.exists():
            self.crash.unlink()
            os.kill(os.getpid(), signal.SIGKILL)  # before DBOS records this model call
        step = ([assistant_message("paid acme")] if answered else
                [function_call("send_payment", {"to": "acme", "amount": 40}, call_id=CALL_ID)])
        return await ScriptedModel([step]).get_response(*args, **kwargs)


def worker(mode: str, work: Path, ledger: str) -> None:
    """One process of the application: start the workflow, or recover it."""
    from dbos import DBOS, SetWorkflowID
    from dbos_openai_agents import DBOSRunner

    from agent_gate import Gate, ToolRegistry
    from agent_gate.integrations.openai_agents import gate_tools

    set_tracing_disabled(True)
    outbox = work / "outbox.jsonl"
    model: Model = Cashier(work / "crash" if mode == "start" else None)

    @function_tool
    def send_payment(to: str, amount: int) -> str:
        """Pay a vendor from the company account."""
        return pay(outbox, to, amount)

    gate = Gate(ToolRegistry(), ledger, policy=POLICY)

    @DBOS.workflow(name="pay_vendor")
    async def pay_vendor(prompt: str) -> str:
        # The gate's task is the workflow: its calls are named by the model's call ids.
        agent = Agent(name="payer", model=model,
                      tools=gate_tools([send_payment], gate, task_id=str(DBOS.workflow_id)))
        result = await DBOSRunner.run(agent, prompt)
        return str(result.final_output)

    DBOS(config={"name": "agent-gate-dbos-openai-agents", "log_level": "WARNING",
                 "system_database_url": f"sqlite:///{work / 'dbos.sqlite'}"})
    DBOS.launch()
    try:
        if mode == "start":
            with SetWorkflowID(WORKFLOW):
                handle = DBOS.start_workflow(pay_vendor, "pay acme 40")  # type: ignore[arg-type]
        else:  # launch() recovered the workflow the killed process left
            handle = DBOS.retrieve_workflow(WORKFLOW)
        print(json.dumps({"final_output": handle.get_result()}))
    finally:
        DBOS.destroy()
        gate.close()


def _seen(db: str) -> int:
    """How often the gate has seen the payment call arrive again, so far."""
    from agent_gate.ledger import Ledger

    with Ledger(db) as ledger:
        return sum(1 for a in ledger.audit(WORKFLOW) if a.event == "seen_again")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="ledger URL (default: a temporary file)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="agent-gate-dbos-oa-"))
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
    final = json.loads(second.stdout.splitlines()[-1])["final_output"]
    paid = [json.loads(line) for line in (work / "outbox.jsonl").read_text().splitlines()]
    with Gate(ToolRegistry(), db) as gate:
        states = {o.call_id: o.state.value for o in gate.calls(WORKFLOW)}
        runs = sum(1 for a in gate.ledger.audit(WORKFLOW) if a.event == "claim")
    asked_again = _seen(db) > seen_first  # the recovered run invoked the tool again
    print(f"2. recovered: {final!r}; the payment call reached the gate again: {asked_again}; "
          f"it ran {runs} time(s); ledger: {states}; payments: {paid}")
    return {"first_status": first.returncode, "final": final, "states": states,
            "runs": runs, "asked_again": asked_again, "paid": paid}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], Path(sys.argv[3]), sys.argv[4])
    else:
        main()
