"""Tools and policy for the racing-workers test, as a user would register them.

Every side effect is appended (and fsynced, with O_APPEND so lines from many
processes never interleave) as one line to the file named by $AG_EFFECTS:
``TASK CALL_ID TOOL attempt=N pid=P``. The test counts those lines, outside the
ledger, to prove each effect happened once.

``hold_post`` writes its effect and then waits, bounded, while $AG_HOLD exists,
after announcing itself with a ``running-PID`` file next to it: the test SIGKILLs
whichever worker won that call, in the middle of the tool.

``put`` (retry-safe) and ``checked`` (not retry-safe, but with a reconcile hook that
looks for its effect line) are for the sweep test.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from agent_gate import CallInfo, Reconciled, Reconciliation, ToolRegistry, current_call

tools = ToolRegistry()

POLICY = """\
version: 1
tools:
  lookup:
    effect: read
    idempotency: natural
    rules:
      - id: lookup-any
        effect: allow
  post:
    effect: write
    idempotency: none
    rules:
      - id: post-any
        effect: allow
    limits:
      - id: posts-per-task
        max_calls: 5
  hold_post:
    effect: write
    idempotency: none
    rules:
      - id: hold-post-any
        effect: allow
  transfer:
    effect: write
    idempotency: none
    rules:
      - id: transfer-up-to-500
        effect: allow
        when:
          - arg: amount
            number: {gt: 0, max: 500}
    limits:
      - id: transfer-total
        sum: amount
        max: 1000
  ship:
    effect: write
    idempotency: none
    rules:
      - id: ship-needs-approval
        effect: approve
"""
POST_LIMIT = 5
TRANSFER_LIMIT = 1000


def effect(tool: str, call: CallInfo | None = None) -> None:
    call = call or current_call()
    line = f"{call.task_id} {call.call_id} {tool} attempt={call.attempt} pid={os.getpid()}\n"
    fd = os.open(os.environ["AG_EFFECTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


OBJ = {"type": "object"}


@tools.tool(schema=OBJ, effect="read", idempotency="natural")
def lookup(**_: Any) -> dict[str, Any]:
    effect("lookup")
    return {"found": True}


@tools.tool(schema=OBJ, effect="write", idempotency="none")
def post(**_: Any) -> dict[str, Any]:
    effect("post")
    return {"posted": True}


@tools.tool(schema=OBJ, effect="write", idempotency="none")
def hold_post(**_: Any) -> dict[str, Any]:
    effect("hold_post")
    marker = os.environ.get("AG_HOLD")
    if marker:
        Path(f"{marker}.running-{os.getpid()}").touch()
        deadline = time.monotonic() + 120  # bounded: a broken test must not hang
        while Path(marker).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    return {"posted": True}


@tools.tool(
    schema={"type": "object", "properties": {"amount": {"type": "number"}},
            "required": ["amount"]},
    effect="write", idempotency="none",
)
def transfer(amount: float, **_: Any) -> dict[str, Any]:
    effect("transfer")
    return {"transferred": amount}


@tools.tool(schema=OBJ, effect="write", idempotency="none")
def ship(**_: Any) -> dict[str, Any]:
    effect("ship")
    return {"shipped": True}


@tools.tool(schema=OBJ, effect="write", idempotency="natural")
def put(**_: Any) -> dict[str, Any]:
    effect("put")
    return {"put": True}


def found_in_effects(call: CallInfo) -> Reconciled:
    """Ask "downstream" (the effects file) whether this call's write happened."""
    path = Path(os.environ["AG_EFFECTS"])
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    if any(line.startswith(f"{call.task_id} {call.call_id} ") for line in lines):
        return Reconciled(Reconciliation.SUCCEEDED, result={"found": call.call_id})
    return Reconciled(Reconciliation.NOT_APPLIED)


@tools.tool(schema=OBJ, effect="write", idempotency="none", reconcile=found_in_effects)
def checked(**_: Any) -> dict[str, Any]:
    effect("checked")
    return {"checked": True}
