"""The tools and kill points the durable-engine tests (DBOS, Celery) share.

Every write is appended, fsynced, as one line to the outbox file named by
``$AG_OUTBOX``: outside the ledger, so a test counts what really happened. A run
stops at a named point, to be SIGKILLed there, when ``$AG_HANG`` names that point:
it touches ``$AG_MARKS/<point>`` and blocks (bounded) until killed. The points, in the
order a gated call passes them:

``before-call``    the engine's code, before the gate sees the call
``before-effect``  the tool, after ``executing`` was committed, before it writes
``after-effect``   the tool, after it wrote, before the gate commits the outcome
``after-outcome``  the gate committed the outcome; the engine has not recorded it
``after-step``     the engine recorded the step (DBOS) or the body returned (Celery)

Importable by worker scripts (they put ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from agent_gate import Gate, Reconciliation, ToolRegistry, current_call
from agent_gate.gate import Outcome

POINTS = ("before-call", "before-effect", "after-effect", "after-outcome", "after-step")
SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "amount": {"type": "integer"}},
    "required": ["to", "amount"],
    "additionalProperties": False,
}


def hang_at(point: str) -> None:
    """Stop here (until SIGKILLed, at most 120 s) when ``$AG_HANG`` names ``point``."""
    if os.environ.get("AG_HANG") != point:
        return
    (Path(os.environ["AG_MARKS"]) / point).touch()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.05)
    raise SystemExit(f"not killed at {point}")


def outbox() -> list[str]:
    path = Path(os.environ["AG_OUTBOX"])
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _write(line: str) -> None:
    with open(os.environ["AG_OUTBOX"], "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def written_key(task_id: str, call_id: str) -> str:
    return f"{task_id}/{call_id}"


def look_up_write(task_id: str, call_id: str) -> Reconciliation:
    """What a reconcile hook finds downstream: the call's line in the outbox, or none."""
    key = written_key(task_id, call_id)
    written = any(line.split(" ", 1)[0] == key for line in outbox())
    return Reconciliation.SUCCEEDED if written else Reconciliation.NOT_APPLIED


def make_tools() -> ToolRegistry:
    """``send_payment``: a write that is never safe to repeat (idempotency none);
    ``checked_payment``: the same write with a reconcile hook that looks the write up
    in the outbox by the call's task and id."""
    tools = ToolRegistry()

    def pay(to: str, amount: int) -> dict[str, Any]:
        info = current_call()
        hang_at("before-effect")
        _write(f"{written_key(info.task_id, info.call_id)} {to} {amount}")
        hang_at("after-effect")
        return {"paid": amount, "to": to}

    def look_up(info: Any) -> Reconciliation:
        return look_up_write(info.task_id, info.call_id)

    tools.register(pay, name="send_payment", schema=SCHEMA, effect="write", idempotency="none")
    tools.register(pay, name="checked_payment", schema=SCHEMA, effect="write",
                   idempotency="none", reconcile=look_up)
    return tools


class HangingGate(Gate):
    """A gate that can stop right after committing an outcome (``after-outcome``)."""

    def execute(self, task_id: str, call: Any, **options: Any) -> Outcome:
        outcome = super().execute(task_id, call, **options)
        hang_at("after-outcome")
        return outcome

    async def aexecute(self, task_id: str, call: Any, **options: Any) -> Outcome:
        outcome = await super().aexecute(task_id, call, **options)
        hang_at("after-outcome")
        return outcome
