"""Without ``opentelemetry-api`` the gate imports none of it and only logs.

The interpreter runs in a subprocess whose import system refuses ``opentelemetry``
(as if it were not installed): the observer resolved is the logging one, a gated
call still works and is logged, and no ``opentelemetry`` module was loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import agent_gate

PROBE = r"""
import importlib.abc, json, logging, sys

class NoOtel(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, NoOtel())
records = []
class Keep(logging.Handler):
    def emit(self, record):
        if record.name == "agent_gate.gate":
            records.append(record.state)
logging.getLogger("agent_gate").addHandler(Keep())
logging.getLogger("agent_gate").setLevel(logging.INFO)

from agent_gate import Gate, ToolRegistry
from agent_gate.telemetry import Observer, otel_available

tools = ToolRegistry()

@tools.tool(schema={"type": "object"}, effect="read")
def ping() -> str:
    return "pong"

with Gate(tools, sys.argv[1], create=True) as gate:
    outcome = gate.execute("t", {"call_id": "c", "name": "ping", "arguments": {}})
    stored = gate.ledger.get("t", "c")
    kind = type(gate.telemetry)
print(json.dumps({
    "available": otel_available(),
    "observer": f"{kind.__module__}.{kind.__name__}",
    "state": outcome.state.value,
    "trace_id": stored.trace_id,
    "records": records,
    "loaded": sorted(m for m in sys.modules if m.startswith("opentelemetry")),
}))
"""


def test_without_opentelemetry_nothing_of_it_is_imported(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(agent_gate.__file__).parent.parent)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, f"sqlite:///{tmp_path / 'l.db'}"],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    )
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen == {
        "available": False,
        "observer": "agent_gate.telemetry.base.Observer",
        "state": "succeeded",
        "trace_id": None,
        "records": ["received", "authorized", "executing", "succeeded"],
        "loaded": [],
    }
