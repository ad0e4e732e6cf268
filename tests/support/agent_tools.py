"""A tool module as a user would write one, for worker processes and `agent-gate replay`.

Every side effect is appended (and fsynced) as one line to the file named by
$AG_EFFECTS, so tests count what really happened outside the ledger. A tool
hangs, to be SIGKILLed mid-run, while the marker file named by $AG_HANG (after the
effect) or $AG_HANG_BEFORE (before it) exists.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from agent_gate import CallInfo, Reconciled, Reconciliation, ToolRegistry, current_call

tools = ToolRegistry()


def effect(line: str) -> None:
    with open(os.environ["AG_EFFECTS"], "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def effects() -> list[str]:
    path = Path(os.environ["AG_EFFECTS"])
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def hang_while(variable: str) -> None:
    marker = os.environ.get(variable)
    if not marker or not Path(marker).exists():
        return
    Path(marker + ".running").touch()
    deadline = time.monotonic() + 60  # bounded: a broken test must not hang forever
    while Path(marker).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


# The shared schemas (``tests/support/schemas.py``), written out: tests copy this module
# elsewhere as a user's own, so it imports nothing of the test tree
# (``tests/test_support.py`` holds the two equal).
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city"],
    "additionalProperties": False,
}
EMAIL = {
    "type": "object",
    "properties": {
        "to": {"type": "string", "format": "email"},
        "subject": {"type": "string"},
        "body": {"type": "string"},
    },
    "required": ["to", "subject", "body"],
    "additionalProperties": False,
}
NOTE = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


@tools.tool(schema=WEATHER, effect="read", idempotency="natural")
def get_weather(city: str, unit: str = "celsius") -> dict[str, Any]:
    effect(f"{current_call().task_id} get_weather {city}")
    return {"city": city, "temperature": 21, "unit": unit}


@tools.tool(schema=EMAIL, effect="write", idempotency="none")
def send_email(to: str, subject: str, body: str) -> dict[str, Any]:
    effect(f"{current_call().task_id} send_email {to} {subject}")
    return {"queued": True}


def _note(kind: str, text: str) -> dict[str, Any]:
    hang_while("AG_HANG_BEFORE")
    key = current_call().idempotency_key
    effect(f"{kind} {text} {key}")
    hang_while("AG_HANG")
    return {"posted": text}


def found_in_effects(call: CallInfo) -> Reconciled:
    """Ask "downstream" (the effects file) whether the write with this key happened."""
    if any(line.endswith(" " + call.idempotency_key) for line in effects()):
        return Reconciled(Reconciliation.SUCCEEDED, result={"found": call.idempotency_key})
    return Reconciled(Reconciliation.NOT_APPLIED)


@tools.tool(schema=NOTE, effect="write", idempotency="none")
def post_note(text: str) -> dict[str, Any]:
    return _note("post_note", text)


@tools.tool(schema=NOTE, effect="write", idempotency="natural")
def put_note(text: str) -> dict[str, Any]:
    return _note("put_note", text)


@tools.tool(schema=NOTE, effect="write", idempotency="none", reconcile=found_in_effects)
def checked_note(text: str) -> dict[str, Any]:
    return _note("checked_note", text)
