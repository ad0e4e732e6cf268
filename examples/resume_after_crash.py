"""Resume a task whose worker crashed in the middle of an external write.

The worst moment for a crash is after a tool did its write and before the
ledger heard back: nobody knows whether the mail went out. agent-gate never
guesses. The call stays recorded as ``executing`` under the dead worker; the
next process that resumes the task finds the worker gone, marks the call
``in_doubt``, and then either asks the tool's reconcile hook ("did the write
with this idempotency key happen?") or leaves it to an operator. It is never
simply run again, because ``send_email`` is declared ``idempotency="none"``.

Run it: ``python examples/resume_after_crash.py`` (``--no-reconcile`` to see
the operator's side). It starts a worker process on a recorded stream; the
worker dies inside ``send_email`` right after the mail is "sent" (a line in an
outbox file). This process then resumes the task, shows what the ledger knew,
and checks that exactly one mail exists. The same from a shell::

    agent-gate tasks --db URL
    agent-gate resume crash-example --tools examples.resume_after_crash --db URL
    agent-gate resolve CALL_ID --as succeeded --by you --db URL   # without a hook
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from agent_gate import (
    CallInfo,
    Gate,
    Reconciled,
    Reconciliation,
    ToolRegistry,
    current_call,
)
from agent_gate.sse import SSEDecoder

HERE = Path(__file__).resolve().parent
STREAM = HERE / "streams" / "openai_responses_tool_calls.sse"
TASK = "crash-example"
OUTBOX_ENV = "AGENT_GATE_EXAMPLE_OUTBOX"
CRASH_ENV = "AGENT_GATE_EXAMPLE_CRASH"


def outbox_path() -> Path:
    return Path(os.environ.get(OUTBOX_ENV) or "outbox.jsonl")


def sent() -> list[dict[str, Any]]:
    path = outbox_path()
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def make_tools(*, reconcile: bool) -> ToolRegistry:
    tools = ToolRegistry()

    def mail_was_sent(call: CallInfo) -> Reconciled:
        """Ask "the mail server" whether the mail with this key went out."""
        for mail in sent():
            if mail["key"] == call.idempotency_key:
                return Reconciled(Reconciliation.SUCCEEDED, result={"queued": True})
        return Reconciled(Reconciliation.NOT_APPLIED)

    @tools.tool(
        schema={"type": "object", "properties": {"city": {"type": "string"},
                                                 "unit": {"type": "string"}}},
        effect="read",
        idempotency="natural",
    )
    def get_weather(city: str, unit: str = "celsius") -> dict[str, Any]:
        return {"city": city, "temperature": 18, "unit": unit}

    @tools.tool(
        schema={"type": "object", "properties": {"to": {"type": "string"},
                                                 "subject": {"type": "string"},
                                                 "body": {"type": "string"}},
                "required": ["to", "subject", "body"]},
        effect="write",
        idempotency="none",
        reconcile=mail_was_sent if reconcile else None,
    )
    def send_email(to: str, subject: str, body: str) -> dict[str, Any]:
        # The downstream write, carrying the gate's stable key so it can be found again.
        with outbox_path().open("a", encoding="utf-8") as f:
            f.write(json.dumps({"to": to, "key": current_call().idempotency_key}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if os.environ.get(CRASH_ENV) == "1":
            os._exit(9)  # the worker dies before the gate can record the outcome
        return {"queued": True}

    return tools


tools = make_tools(reconcile=True)
"""For ``agent-gate resume crash-example --tools examples.resume_after_crash``."""


def recorded_events() -> list[Any]:
    decoder = SSEDecoder()
    events = decoder.feed(STREAM.read_bytes())
    decoder.end()
    return events


def worker(db: str) -> None:
    """The agent process that will crash: it streams the response through the gate."""
    with Gate(tools, db, create=True) as gate:  # the first process starts the ledger
        gate.run(recorded_events(), task_id=TASK, provider="openai-responses")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="ledger URL (default: a temporary file)")
    parser.add_argument("--no-reconcile", action="store_true",
                        help="send_email has no reconcile hook: an operator settles it")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.db)
        return {}

    workdir = Path(tempfile.mkdtemp(prefix="agent-gate-crash-"))
    db = args.db or f"sqlite:///{workdir / 'ledger.db'}"
    os.environ.setdefault(OUTBOX_ENV, str(workdir / "outbox.jsonl"))
    env = {**os.environ, CRASH_ENV: "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    crashed = subprocess.run([sys.executable, __file__, "--worker", "--db", db], env=env,
                             timeout=120, check=False)
    print(f"worker exited with status {crashed.returncode} inside send_email; "
          f"mails in the outbox: {len(sent())}")

    registry = make_tools(reconcile=not args.no_reconcile)
    report: dict[str, Any] = {"worker_status": crashed.returncode, "db": db}
    with Gate(registry, db) as gate:
        report["before"] = {o.call_id: o.state.value for o in gate.calls(TASK)}
        print("the ledger after the crash:", report["before"])
        resumed = gate.resume(TASK)
        for o in resumed:
            print(f"resume: {o.call_id} -> {o.state.value}: {o.reason}")
        report["resumed"] = {o.call_id: o.state.value for o in resumed}
        for blocker in gate.blockers(TASK):
            # Without a hook an operator looks downstream, then settles the call.
            print(f"{blocker.call_id} needs {blocker.needs}: {blocker.reason}")
            [record] = gate.ledger.find(blocker.call_id, TASK)
            found = any(mail["to"] == (record.arguments or {}).get("to") for mail in sent())
            settled = gate.resolve(blocker.call_id, task_id=TASK,
                                   as_="succeeded" if found else "not_applied",
                                   by="example-operator", note="checked the outbox")
            print(f"operator: {settled.call_id} -> {settled.state.value}")
        again = gate.run(recorded_events(), task_id=TASK, provider="openai-responses")
        report["again"] = {o.call_id: (o.state.value, o.replayed) for o in again.outcomes}
        print("the same stream again:", report["again"])
    report["sent"] = sent()
    print(f"mails in the outbox: {len(report['sent'])}")
    return report


if __name__ == "__main__":
    main()
