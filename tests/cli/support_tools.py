"""The example policy's five tools, as a user would register them (policies/example.yaml).

Every side effect is appended (and fsynced) as one line to the file named by
$AG_EFFECTS, so tests count what really happened outside the ledger. A tool waits
while the file named by $AG_HOLD exists (bounded), so a test can hold a call
mid-run while another process races it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from agent_gate import ToolRegistry, current_call

tools = ToolRegistry()


def effect(line: str) -> None:
    with open(os.environ["AG_EFFECTS"], "a", encoding="utf-8") as f:
        f.write(f"{current_call().task_id} {line}\n")
        f.flush()
        os.fsync(f.fileno())


def effects() -> list[str]:
    path = Path(os.environ["AG_EFFECTS"])
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def hold() -> None:
    marker = os.environ.get("AG_HOLD")
    deadline = time.monotonic() + 30
    while marker and Path(marker).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@tools.tool(
    schema={"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"], "additionalProperties": False},
    effect="read", idempotency="natural",
)
def get_weather(city: str) -> dict[str, Any]:
    effect(f"get_weather {city}")
    return {"city": city, "temperature": 21}


@tools.tool(
    schema={"type": "object",
            "properties": {"to": {"type": "string"}, "subject": {"type": "string"},
                           "body": {"type": "string"}},
            "required": ["to", "subject", "body"], "additionalProperties": False},
    # Registered as a read to show the policy can only make it more careful: the
    # example policy says write / none, and that is what the gate records.
    effect="read", idempotency="natural",
)
def send_email(to: str, subject: str, body: str) -> dict[str, Any]:
    hold()
    effect(f"send_email {to} {subject}")
    return {"queued": True}


@tools.tool(
    schema={"type": "object",
            "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"},
                           "card_last4": {"type": "string"}},
            "required": ["order_id", "amount"], "additionalProperties": False},
    effect="write", idempotency="key",
)
def refund(order_id: str, amount: float, card_last4: str = "") -> dict[str, Any]:
    hold()
    effect(f"refund {order_id} {amount}")
    return {"refunded": amount}


@tools.tool(
    schema={"type": "object", "properties": {"path": {"type": "string"}},
            "required": ["path"], "additionalProperties": False},
    effect="destructive", idempotency="natural",
)
def delete_file(path: str) -> dict[str, Any]:
    effect(f"delete_file {path}")
    return {"deleted": path}


@tools.tool(
    schema={"type": "object", "properties": {"url": {"type": "string"}},
            "required": ["url"], "additionalProperties": False},
    effect="read", idempotency="natural",
)
def fetch_url(url: str) -> dict[str, Any]:
    effect(f"fetch_url {url}")
    return {"status": 200}


@tools.tool(
    schema={"type": "object", "properties": {"text": {"type": "string"}},
            "required": ["text"], "additionalProperties": False},
    effect="write", idempotency="none",
)
def post_note(text: str) -> dict[str, Any]:
    """Not in the example policy (so only runs without one); times out on 'timeout...'."""
    from agent_gate import OutcomeUnknown

    effect(f"post_note {text}")
    if text.startswith("timeout"):
        raise OutcomeUnknown("the note service did not answer")
    return {"posted": text}
