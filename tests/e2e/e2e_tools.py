"""The tools the end-to-end tests run: every execution leaves one line in a file.

The file ($AG_E2E_EFFECTS) is the tests' independent witness: the ledger says
what it decided, the file says what really happened. Imported in-process by the
tests and as ``--tools e2e_tools`` by the CLI in a subprocess.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support

from support.schemas import EMAIL_ANY_TO, PATH, WEATHER

from agent_gate import ToolRegistry, current_call

tools = ToolRegistry()

def effect(tool: str) -> None:
    call = current_call()
    with open(os.environ["AG_E2E_EFFECTS"], "a", encoding="utf-8") as f:
        f.write(f"{call.task_id} {call.call_id} {tool}\n")
        f.flush()
        os.fsync(f.fileno())


def executions(path: Path, task_id: str | None = None) -> Counter[str]:
    """How many times each call id ran (for one task, or all)."""
    counts: Counter[str] = Counter()
    if not path.exists():
        return counts
    for line in path.read_text(encoding="utf-8").splitlines():
        task, call_id, _tool = line.split(" ")
        if task_id is None or task == task_id:
            counts[call_id] += 1
    return counts


@tools.tool(schema=WEATHER, effect="read", idempotency="natural")
def get_weather(city: str, unit: str = "celsius") -> dict[str, Any]:
    effect("get_weather")
    return {"city": city, "temperature": 21, "unit": unit}


@tools.tool(schema=EMAIL_ANY_TO, effect="write", idempotency="none")
def send_email(to: str, subject: str, body: str) -> dict[str, Any]:
    effect("send_email")
    return {"queued": True}


@tools.tool(schema=PATH, effect="destructive", idempotency="natural")
def delete_file(path: str) -> dict[str, Any]:
    effect("delete_file")
    return {"deleted": path}
