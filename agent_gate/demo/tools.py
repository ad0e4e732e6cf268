"""The demo's tools: the five tools of ``policies/example.yaml``, made harmless.

None of them reaches the network or touches a file other than the outbox: each
appends one JSON line saying what it *would* have done to the outbox file, then
returns a plausible result. The outbox is how the demo (and its tests) count
real executions independently of the ledger: a call that ran twice would show
two lines.

The outbox is ``$AGENT_GATE_DEMO_OUTBOX``, else ``.agent-gate-demo/outbox.jsonl``
under the current directory, resolved at each call, so that a later
``agent-gate resume ... --tools agent_gate.demo.tools`` started from the same
directory writes to the same file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent_gate.gate import current_call
from agent_gate.tools import ToolRegistry

__all__ = ["OUTBOX_ENV", "ledger_tag", "outbox_counts", "outbox_path", "recording_for", "tools"]

OUTBOX_ENV = "AGENT_GATE_DEMO_OUTBOX"
DEFAULT_OUTBOX = Path(".agent-gate-demo") / "outbox.jsonl"

tools = ToolRegistry()


def outbox_path() -> Path:
    return Path(os.environ.get(OUTBOX_ENV) or DEFAULT_OUTBOX)


_recording: dict[str, str | None] = {"ledger": None}
"""The ledger the tools run under now (``recording_for``)."""


def ledger_tag(url: str) -> str:
    """A short name for a ledger, kept on each outbox line: the outbox belongs to a
    directory, the runs it counts to one ledger, so a demo on another ``--db`` in the
    same directory must not count this ledger's runs as its own (nor as runs twice)."""
    return hashlib.sha256(url.encode("utf-8")).hexdigest()[:12]


@contextmanager
def recording_for(tag: str) -> Iterator[None]:
    """The lines the tools append in the block name the ledger ``tag``."""
    before = _recording["ledger"]
    _recording["ledger"] = tag
    try:
        yield
    finally:
        _recording["ledger"] = before


def _record(action: str, **details: Any) -> None:
    """Append one line, flushed and fsynced before the tool returns its result."""
    call = current_call()
    path = outbox_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    line = {"task": call.task_id, "call_id": call.call_id, "tool": call.tool, "action": action}
    if _recording["ledger"] is not None:
        line["ledger"] = _recording["ledger"]
    line.update(details)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def outbox_counts(task_id: str | None = None, ledger: str | None = None) -> Counter[str]:
    """How many times each call id really ran (lines in the outbox), for one task or
    all, under one ledger (its ``ledger_tag``) or any. A line without a tag (a tool
    run by ``resume`` or ``execute`` rather than by the demo) counts for every ledger."""
    path = outbox_path()
    counts: Counter[str] = Counter()
    if not path.exists():
        return counts
    for raw in path.read_text(encoding="utf-8").splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue  # a torn last line after a crash: not a completed record
        if (isinstance(line, dict) and (task_id is None or line.get("task") == task_id)
                and (ledger is None or line.get("ledger") in (None, ledger))):
            counts[str(line.get("call_id"))] += 1
    return counts


WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 100},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
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
PATH = {
    "type": "object",
    "properties": {"path": {"type": "string", "minLength": 1}},
    "required": ["path"],
    "additionalProperties": False,
}
REFUND = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "amount": {"type": "number", "exclusiveMinimum": 0},
        "card_last4": {"type": "string"},
    },
    "required": ["order_id", "amount"],
    "additionalProperties": False,
}
URL = {
    "type": "object",
    "properties": {"url": {"type": "string", "format": "uri"}},
    "required": ["url"],
    "additionalProperties": False,
}


@tools.tool(schema=WEATHER, effect="read", idempotency="natural")
def get_weather(city: str, unit: str = "celsius") -> dict[str, Any]:
    """Canned weather: a read, so the gate runs it as soon as its call is complete."""
    _record("looked up the weather", city=city)
    return {"city": city, "temperature": 24 if unit == "celsius" else 75, "unit": unit}


@tools.tool(schema=EMAIL, effect="write", idempotency="none")
def send_email(to: str, subject: str, body: str) -> dict[str, Any]:
    """Would send mail: a write, run only after the response completed, never twice."""
    _record("would send mail", to=to, subject=subject)
    return {"queued": True, "to": to}


@tools.tool(schema=PATH, effect="destructive", idempotency="natural")
def delete_file(path: str) -> dict[str, Any]:
    """Would delete a file; deletes nothing."""
    _record("would delete a file", path=path)
    return {"deleted": path}


@tools.tool(schema=REFUND, effect="write", idempotency="key")
def refund(order_id: str, amount: float, card_last4: str | None = None) -> dict[str, Any]:
    """Would refund an order, passing the gate's idempotency key to the payment API."""
    _record("would refund", order_id=order_id, amount=amount, key=current_call().idempotency_key)
    return {"refunded": amount, "order_id": order_id}


@tools.tool(schema=URL, effect="read", idempotency="natural")
def fetch_url(url: str) -> dict[str, Any]:
    """Would fetch a page; makes no request."""
    _record("would fetch", url=url)
    return {"url": url, "status": 200, "body": "(not fetched: demo tool)"}
